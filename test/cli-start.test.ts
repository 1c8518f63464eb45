import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
// The project's codec, not msgpackr's main entry: that one turns on msgpackr's native extractor for
// every later test in this worker (test/codec.test.ts checks it stays off).
import { encode } from '../src/protocol/codec.js';
import { readHookFrame } from '../src/protocol/messages.js';
import { SummarySchema } from '../src/protocol/summary.js';
import { InputError, parseInput } from '../src/protocol/parse.js';
import { VERSION } from '../src/version.js';
import { stackFrame } from './support/hook-client.js';
import { ROOT } from './support/sidecar.js';

/**
 * What makes the CLI start fast, as behaviour (the times are scripts/bench-start.mjs's): `--help`
 * declares every command without loading one, and the schemas the build precompiled
 * (scripts/build-validators.mjs, dist/validators) are used in place of compiling and judge exactly
 * as a compile at run time does. The tests run from src/, which has no precompiled validators, so
 * the built side runs in a child Node on dist/.
 */

const CLI = path.join(ROOT, 'dist/cli.js');
const SUMMARY = path.join(ROOT, 'test/fixtures/fix-checks/demo-regimes/summary.json');

/** Runs `code` (an ES module) in a child Node at the repository root; its stdout. */
const node = (code: string) => execFileSync(process.execPath, ['--input-type=module', '-e', code], { cwd: ROOT, encoding: 'utf8' });

/** A hook's answer to a capture. */
const STACK = stackFrame(3, 5);

describe('the CLI at start', () => {
  it('lists every command in --help and loads none of them to do it', () => {
    // On exit (commander exits after the help), the CommonJS modules loaded: fastify, Ajv, pino,
    // prom-client and systeminformation land in require's cache when a command's code is loaded.
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', `
      import { createRequire } from 'node:module';
      import { pathToFileURL } from 'node:url';
      const cache = createRequire(import.meta.url).cache;
      process.on('exit', () => process.stderr.write(JSON.stringify(Object.keys(cache))));
      process.argv = [process.argv[0], ${JSON.stringify(CLI)}, '--help'];
      await import(pathToFileURL(${JSON.stringify(CLI)}).href);
    `], { cwd: ROOT, encoding: 'utf8' });
    expect(run.status).toBe(0);
    const help = run.stdout;
    const modules = JSON.parse(run.stderr) as string[];
    for (const command of ['serve', 'report', 'compare', 'replay', 'watch', 'demo', 'run', 'merge', 'top', 'gate', 'capture']) expect(help).toMatch(new RegExp(`^  ${command}\\b`, 'm'));
    // CommonJS dependencies of the commands (fastify, Ajv, pino, prom-client) land in require's cache when loaded.
    expect(modules.some((file) => file.includes('node_modules/commander/')), 'the probe sees what is loaded').toBe(true);
    expect(modules.filter((file) => /node_modules\/(fastify|ajv|pino|prom-client|systeminformation)\//.test(file))).toEqual([]);
  });

  it('prints its version', () => {
    expect(execFileSync(process.execPath, [CLI, '--version'], { encoding: 'utf8' }).trim()).toBe(VERSION);
  });

  it('reads a summary with the precompiled validator: Ajv never compiles', () => {
    const out = node(`
      import { createRequire } from 'node:module';
      const { readSummary } = await import('./dist/outputs/summary-files.js');
      const summary = await readSummary(${JSON.stringify(SUMMARY)});
      const loaded = Object.keys(createRequire(import.meta.url).cache);
      console.log(JSON.stringify({ job: summary.job, compiler: loaded.some((file) => file.endsWith('/ajv/dist/core.js')), precompiled: loaded.some((file) => file.includes('/dist/validators/')) }));
    `);
    const summary = JSON.parse(readFileSync(SUMMARY, 'utf8')) as { job: string };
    expect(JSON.parse(out)).toEqual({ job: summary.job, compiler: false, precompiled: true });
  });

  it("reads a hook's frames with the precompiled validators: serve's first hello no longer compiles", () => {
    // Each kind a hook sends, the steps frame with its rows before its fields (the general path's, not the byte reader's).
    const frames = [
      { v: 1, type: 'hello', job: 'j', rank: 0, local_rank: 0, world_size: 1, pid: 7, host: 'h', session: 's1', clock: { wall_ns: 1, mono_ns: 1 }, env: { python: '3.12' } },
      { v: 1, type: 'env', env: { torch: '2.5' } },
      { v: 1, type: 'steps', rows: [[1, 0, 10, 5, 1, 1, 1, null]], fields: ['seq', 'step', 'end_ns', 'dur_ns', 'data_ns', 'h2d_ns', 'compute_ns', 'samples'], dropped: 0 },
      { v: 1, type: 'counters', source: 'process', samples: [{ at_ns: 5, cpu_main_s: 1.5, cpu_workers_s: 2, workers: 4, rss_bytes: 1e9 }] },
      { v: 1, type: 'counters', source: 'nvml', samples: [{ at_ns: 5, util_gpu: 97.5, power_w: 698.23, pstate: 'P0', uuid: null }] },
      { v: 1, type: 'counters', source: 'memory', samples: [{ at_ns: 5, device: 0, allocated_bytes: 1e9, reserved_bytes: 2e9 }] },
      STACK,
      { v: 1, type: 'profile', id: 1, seq: 0, last: true, error: 'no profiler here' },
      { v: 1, type: 'end', reason: 'exit' },
    ];
    const out = node(`
      import { createRequire } from 'node:module';
      const { encode } = await import('./dist/protocol/codec.js');
      const { readHookFrame } = await import('./dist/protocol/messages.js');
      const types = ${JSON.stringify(frames)}.map((frame) => readHookFrame(encode(frame)).type);
      const loaded = Object.keys(createRequire(import.meta.url).cache);
      console.log(JSON.stringify({ types, compiler: loaded.some((file) => file.endsWith('/ajv/dist/core.js')), precompiled: loaded.some((file) => file.includes('/dist/validators/')) }));
    `);
    expect(JSON.parse(out)).toEqual({ types: ['hello', 'env', 'steps', 'counters', 'counters', 'counters', 'stack', 'profile', 'end'], compiler: false, precompiled: true });
  });

  it("refuses a hook's bad frames with the same reasons through the precompiled validators as through Ajv at run time", () => {
    const bad = [
      { v: 1, type: 'hello', job: 'j', rank: -1, local_rank: 0, world_size: 1, pid: 7, host: 'h', session: 's1', clock: { wall_ns: 1, mono_ns: 1 }, env: {} },
      { v: 1, type: 'hello', job: 'j\u0001', rank: 0, local_rank: 0, world_size: 1, pid: 7, host: 'h', session: 's1', clock: { wall_ns: 1, mono_ns: 1 }, env: {} },
      { v: 1, type: 'env', env: 'not a map' },
      { v: 1, type: 'steps', rows: [[1, 0, 10, 5, 1, 1, 1, null]], fields: ['seq', 'step', 'end_ns', 'dur_ns', 'data_ns', 'h2d_ns', 'compute_ns', 'samples'], dropped: -1 },
      { v: 1, type: 'counters', source: 'nvml', samples: [{ at_ns: 5, util_gpu: 'busy' }] },
      { v: 1, type: 'counters', source: 'memory', samples: [{ at_ns: 5, allocated_bytes: -1 }] },
      { ...STACK, still_ms: 'long' },
      { v: 1, type: 'profile', id: 1, seq: -1, last: true },
      { v: 1, type: 'end', reason: 'x'.repeat(65) },
    ];
    const here = bad.map((frame) => {
      try {
        readHookFrame(encode(frame));
        return null;
      } catch (error) {
        return (error as Error).message;
      }
    });
    expect(here.every((message) => message !== null)).toBe(true);
    const built = node(`
      const { encode } = await import('./dist/protocol/codec.js');
      const { readHookFrame } = await import('./dist/protocol/messages.js');
      console.log(JSON.stringify(${JSON.stringify(bad)}.map((frame) => { try { readHookFrame(encode(frame)); return null; } catch (error) { return error.message; } })));
    `);
    expect(JSON.parse(built)).toEqual(here);
  });

  it('refuses a bad summary with the same reason through the precompiled validator as through Ajv at run time', () => {
    const good = JSON.parse(readFileSync(SUMMARY, 'utf8')) as Record<string, unknown>;
    const bad: Array<Record<string, unknown>> = [
      { ...good, steps: 1.5 },
      { ...good, started_at: 'yesterday' },
      { ...good, verdict: 42 },
      (({ job: _job, ...rest }) => rest)(good),
      { ...good, ranks: [{ rank: 'zero' }] },
    ];
    const here = bad.map((value) => {
      try {
        parseInput(SummarySchema, value, 'summary');
        return null;
      } catch (error) {
        expect(error).toBeInstanceOf(InputError);
        return (error as Error).message;
      }
    });
    expect(here.every((message) => message !== null)).toBe(true);
    const built = node(`
      const { parseInput } = await import('./dist/protocol/parse.js');
      const { SummarySchema } = await import('./dist/protocol/summary.js');
      const bad = ${JSON.stringify(bad)};
      console.log(JSON.stringify(bad.map((value) => { try { parseInput(SummarySchema, value, 'summary'); return null; } catch (error) { return error.message; } })));
    `);
    expect(JSON.parse(built)).toEqual(here);
  });
});
