#!/usr/bin/env node
// `node dist/probe.js [/healthz|/readyz]`: exit 0 when the local sidecar answers 200. For container
// health checks and Kubernetes exec probes, which cannot read the token from a Secret into an HTTP
// probe's headers. Imports nothing of the sidecar, so it starts in a few tens of milliseconds.
const path = process.argv[2] ?? '/healthz';
const port = process.env.STEPSCOPE_PORT ?? '9477';
const token = process.env.STEPSCOPE_TOKEN;
const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};

fetch(`http://127.0.0.1:${port}${path}`, { headers, signal: AbortSignal.timeout(2_000) }).then(
  (response) => process.exit(response.ok ? 0 : 1),
  () => process.exit(1),
);
