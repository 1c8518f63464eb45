/**
 * Node's flags for a sidecar process, on every path that starts one (the image's NODE_OPTIONS,
 * `npm start`, the demo, the benchmarks' scripts/sidecar.mjs; the README gives them for a start of
 * one's own). Young generation at most 3 × 8 MiB: V8's default lets it grow to 48 MiB (192 MiB on
 * Node 24 on a large host) under a burst of steps, and the sidecar's RSS with it (issue 24, target 1;
 * BENCHMARKS.md, "The young generation's size"). A V8 flag: it must be given at start, since
 * v8.setFlagsFromString after start does not resize the young generation.
 */
export const SIDECAR_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=8'];

/** NODE_OPTIONS as the image sets it (the Dockerfile's ENV): old space at half the container's memory limit, and the flags above. */
export const IMAGE_NODE_OPTIONS = ['--max-old-space-size-percentage=50', ...SIDECAR_NODE_FLAGS].join(' ');
