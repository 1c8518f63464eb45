import { PrometheusClient } from './prometheus/client.js';
import { fetchJobData } from './prometheus/job-data.js';
import { fetchJobGpus } from './prometheus/job-gpus.js';
import { jobSummary } from './prometheus/job-summary.js';
import { emitSummary, type EmitOptions } from './outputs/summary-emit.js';

/**
 * `stepscope report --prometheus URL --job J`: the summary and HTML report a sidecar writes, for a
 * job across all its pods, from Prometheus's range queries over them.
 */

export interface PrometheusReportOptions extends EmitOptions {
  prometheus: string;
  job: string;
  from: number;
  to: number;
  step?: number;
  window?: number;
  gpuHourPrice?: number;
}

export async function reportFromPrometheus(options: PrometheusReportOptions, out: NodeJS.WritableStream = process.stdout): Promise<void> {
  const client = new PrometheusClient(options.prometheus);
  const data = await fetchJobData(client, { job: options.job, from: options.from, to: options.to, step: options.step, window: options.window });
  const gpus = await fetchJobGpus(client, options.job, options.from, options.to);
  await emitSummary(jobSummary(data, options.gpuHourPrice ?? null, gpus), options, out);
}
