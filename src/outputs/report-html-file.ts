import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import type { Summary } from '../protocol/summary.js';
import { renderReport, type ReportAssets } from './report-html.js';

/** uPlot as npm installed it: read once, inlined into every report. */
let assets: Promise<ReportAssets> | null = null;

export function reportAssets(): Promise<ReportAssets> {
  assets ??= (async () => {
    const require = createRequire(import.meta.url);
    const [uplotJs, uplotCss] = await Promise.all([
      readFile(require.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8'),
      readFile(require.resolve('uplot/dist/uPlot.min.css'), 'utf8'),
    ]);
    return { uplotJs, uplotCss };
  })();
  // A failed read (a broken install) is tried again next time, not remembered.
  assets.catch(() => (assets = null));
  return assets;
}

/** The summary's self-contained HTML report. */
export async function htmlReport(summary: Summary): Promise<string> {
  return renderReport(summary, await reportAssets());
}
