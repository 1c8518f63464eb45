import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DcgmSource, type DcgmSourceOptions } from '../src/counters/dcgm.js';
import { Supervised } from '../src/counters/source.js';
import type { GpuSample } from '../src/counters/types.js';
import { capturedLogger } from './support/logger.js';
import { ROOT, startSidecar, waitFor } from './support/sidecar.js';

const H100_PODS = readFileSync(path.join(ROOT, 'test/fixtures/dcgm/3.x-h100-pods.txt'), 'utf8');
const NODE_EXPORTER = readFileSync(path.join(ROOT, 'test/fixtures/dcgm/not-dcgm-node-exporter.txt'), 'utf8');
/** The literal 1.x capture, with only the family the parser has no mapping for. */
const UNREAD_1X = readFileSync(path.join(ROOT, 'test/fixtures/dcgm/1.x-pod-gpu-metrics-exporter.txt'), 'utf8')
  .split('\n')
  .filter((line) => line.includes('dcgm_low_util_violation'))
  .join('\n');
const LLAMA = { pod: 'llama-ft-0', namespace: 'research' };
const SCRAPE_FAILED = 'dcgm: no reading';

/** A dcgm-exporter stand-in on 127.0.0.1 that serves a fixture and can misbehave on demand. */
class StandInExporter {
  body = H100_PODS;
  status = 200;
  delayMs = 0;
  hang = false;
  requests = 0;
  inFlight = 0;
  maxInFlight = 0;
  port = 0;
  private server: http.Server | null = null;

  get url(): string {
    return `http://127.0.0.1:${this.port}/metrics`;
  }

  async listen(port = 0): Promise<void> {
    const server = http.createServer((_request, response) => this.answer(response));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', resolve);
    });
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (!server) return;
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }

  private answer(response: http.ServerResponse): void {
    this.requests += 1;
    this.inFlight += 1;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    response.once('close', () => (this.inFlight -= 1));
    if (this.hang) return;
    setTimeout(() => response.writeHead(this.status, { 'content-type': 'text/plain; version=0.0.4' }).end(this.body), this.delayMs);
  }
}


async function unusedPort(): Promise<number> {
  const probe = new StandInExporter();
  await probe.listen();
  await probe.close();
  return probe.port;
}

describe('the DCGM source, supervised, against a stand-in dcgm-exporter', () => {
  const exporters: StandInExporter[] = [];
  const collectors: Array<Supervised<GpuSample[]>> = [];

  afterEach(async () => {
    await Promise.all(collectors.splice(0).map((collector) => collector.stop()));
    await Promise.all(exporters.splice(0).map((exporter) => exporter.close()));
  });

  async function exporter(): Promise<StandInExporter> {
    const started = new StandInExporter();
    await started.listen();
    exporters.push(started);
    return started;
  }

  /** Supervised as the registry runs it: the first scrape must work (else another source is tried). */
  function collector({ intervalMs = 25, timeoutMs = 5_000, ...options }: Partial<DcgmSourceOptions> & { url: string; intervalMs?: number; timeoutMs?: number }) {
    const { log, lines } = capturedLogger();
    const now = () => 1_000;
    const made = new Supervised(new DcgmSource({ select: LLAMA, now, ...options }), { intervalMs, timeoutMs, log, now, count: (samples) => samples.length });
    collectors.push(made);
    const batches: GpuSample[][] = [];
    const sink = (samples: GpuSample[]) => void batches.push(samples);
    return { collector: { start: (given: typeof sink) => made.start(given, { required: true }), stop: () => made.stop(), health: () => made.health() }, batches, lines, sink };
  }

  it('starts on the first scrape that finds the pod’s GPUs and keeps delivering them', async () => {
    const stub = await exporter();
    const { collector: dcgm, batches, sink } = collector({ url: stub.url });
    await dcgm.start(sink);
    expect(batches).toHaveLength(1);
    expect(batches[0]!.map((gpu) => [gpu.index, gpu.at, gpu.utilGpu])).toEqual([
      [0, 1_000, 100],
      [1, 1_000, 100],
    ]);
    await waitFor(() => batches.length >= 3);
    const health = dcgm.health();
    expect(health).toMatchObject({ name: 'dcgm', state: 'ok', lastSampleAt: 1_000, lastError: null });
    expect(health.samples).toBe(2 * batches.length);
  });

  it('refuses to start when no GPU matches, naming the selector and the pods it saw', async () => {
    const stub = await exporter();
    const { collector: dcgm, sink, lines } = collector({ url: stub.url, select: { pod: 'llama-ft-9', namespace: 'research' } });
    await expect(dcgm.start(sink)).rejects.toThrow(
      `the exporter reports 4 GPU(s), none with namespace=research pod=llama-ft-9 (pods it maps GPUs to: research/llama-ft-0, serving/vllm-7c9d8-qx2mz)`,
    );
    expect(dcgm.health()).toMatchObject({ state: 'failing', samples: 0 });
    // The caller falls back to another source; a retry warning would be misleading.
    expect(lines.filter((line) => line.msg === SCRAPE_FAILED)).toEqual([]);
  });

  it('refuses to start when nothing listens at the URL', async () => {
    const url = `http://127.0.0.1:${await unusedPort()}/metrics`;
    const { collector: dcgm, sink } = collector({ url });
    await expect(dcgm.start(sink)).rejects.toThrow(/ECONNREFUSED/);
  });

  it('refuses to start when the exporter answers with an HTTP error', async () => {
    const stub = await exporter();
    stub.status = 503;
    const { collector: dcgm, sink } = collector({ url: stub.url });
    await expect(dcgm.start(sink)).rejects.toThrow(/HTTP 503 Service Unavailable/);
  });

  it('refuses to start when the exporter does not answer in time', async () => {
    const stub = await exporter();
    stub.hang = true;
    const { collector: dcgm, sink } = collector({ url: stub.url, timeoutMs: 200 });
    await expect(dcgm.start(sink)).rejects.toThrow('no reading in 200 ms');
  });

  it('never starts a scrape before the previous one has ended', async () => {
    const stub = await exporter();
    stub.delayMs = 100;
    const { collector: dcgm, sink } = collector({ url: stub.url, intervalMs: 10, timeoutMs: 5_000 });
    await dcgm.start(sink);
    await waitFor(() => stub.requests >= 5);
    expect(stub.maxInFlight).toBe(1);
  });

  it('keeps retrying a failing exporter, logs the error once, and recovers', async () => {
    const stub = await exporter();
    const { collector: dcgm, lines, sink, batches } = collector({ url: stub.url });
    await dcgm.start(sink);
    stub.status = 500;
    const failingFrom = stub.requests;
    await waitFor(() => stub.requests >= failingFrom + 5);
    expect(dcgm.health()).toMatchObject({ state: 'failing', lastError: 'HTTP 500 Internal Server Error' });
    expect(lines.filter((line) => line.msg === SCRAPE_FAILED)).toHaveLength(1);

    stub.status = 200;
    const delivered = batches.length;
    await waitFor(() => dcgm.health().state === 'ok' && batches.length > delivered);
    expect(dcgm.health().lastError).toBeNull();
    expect(lines.some((line) => line.msg === 'dcgm: reading again')).toBe(true);
  });

  it('logs again when the error changes', async () => {
    const stub = await exporter();
    const { collector: dcgm, lines, sink } = collector({ url: stub.url });
    await dcgm.start(sink);
    stub.status = 500;
    await waitFor(() => lines.some((line) => line.err === 'HTTP 500 Internal Server Error'));
    stub.status = 200;
    stub.body = H100_PODS.replaceAll('llama-ft-0', 'llama-ft-1');
    await waitFor(() => lines.filter((line) => line.msg === SCRAPE_FAILED).length === 2);
    expect(dcgm.health().lastError).toMatch(/none with namespace=research pod=llama-ft-0/);
  });

  it('rides out the exporter going away and picks it up when it comes back on the same port', async () => {
    const stub = await exporter();
    const { collector: dcgm, sink, batches } = collector({ url: stub.url });
    await dcgm.start(sink);
    await stub.close();
    await waitFor(() => /ECONNREFUSED/.test(dcgm.health().lastError ?? ''));
    expect(dcgm.health().state).toBe('failing');

    const delivered = batches.length;
    await stub.listen(stub.port);
    await waitFor(() => batches.length > delivered);
    expect(dcgm.health()).toMatchObject({ state: 'ok', lastError: null });
  });

  it('refuses to start on a page with nothing it can read, naming what the page holds', async () => {
    const stub = await exporter();
    stub.body = NODE_EXPORTER;
    const { collector: dcgm, sink } = collector({ url: stub.url });
    await expect(dcgm.start(sink)).rejects.toThrow(`serves nothing stepscope can read as GPU counters: 5 metric families, none of them DCGM's`);
    expect(dcgm.health()).toMatchObject({ state: 'failing', samples: 0 });
  });

  it('says once, and in its health, when a working exporter turns unreadable', async () => {
    const stub = await exporter();
    const { collector: dcgm, lines, sink } = collector({ url: stub.url });
    await dcgm.start(sink);
    stub.body = UNREAD_1X;
    const from = stub.requests;
    await waitFor(() => stub.requests >= from + 6);
    expect(dcgm.health()).toMatchObject({ state: 'failing', lastError: expect.stringContaining('1.x exporter names stepscope does not read (dcgm_low_util_violation)') });
    expect(lines.filter((line) => line.msg === SCRAPE_FAILED)).toHaveLength(1);
  });

  it('stops scraping on stop(), even in the middle of a scrape that hangs', async () => {
    const stub = await exporter();
    const { collector: dcgm, sink } = collector({ url: stub.url, timeoutMs: 60_000 });
    await dcgm.start(sink);
    stub.hang = true;
    await waitFor(() => stub.inFlight === 1);
    await dcgm.stop();
    const requests = stub.requests;
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(stub.requests).toBe(requests);
    expect(dcgm.health().state).toBe('stopped');
  });
});

describe('a sidecar whose --dcgm-url gives nothing readable', () => {
  it('says so once in its log, in the state\'s counter health and in /readyz, and takes the hooks\' readings', async () => {
    const stub = new StandInExporter();
    stub.body = UNREAD_1X;
    await stub.listen();
    const sidecar = await startSidecar(['--gpu-source', 'auto', '--dcgm-url', stub.url, '--gpu-interval', '100'], { PATH: '/nonexistent' });
    try {
      const state = await sidecar.state();
      expect(state.counters.gpu_source).toBe('hook');
      expect(state.counters.gpu_health).toMatchObject({ name: 'dcgm', state: 'failing', lastError: expect.stringContaining('1.x exporter names stepscope does not read (dcgm_low_util_violation)') });
      const ready = await fetch(`${sidecar.http}/readyz`);
      expect(ready.status).toBe(200);
      const body = (await ready.json()) as { status: string; detail?: string[] };
      expect(body.status).toBe('ready');
      expect(body.detail).toEqual([expect.stringMatching(/^GPU counters: dcgm: dcgm-exporter at .* serves nothing stepscope can read as GPU counters: 1\.x exporter names .*; GPU counters come from the hooks' NVML readings instead$/)]);
      const warnings = sidecar.logs.filter((line) => line.level >= 40 && /DCGM exporter/.test(line.msg));
      expect(warnings).toHaveLength(1);
      expect(warnings[0]!.err).toContain('1.x exporter names');
    } finally {
      await sidecar.stop('SIGKILL');
      await stub.close();
    }
  });
});
