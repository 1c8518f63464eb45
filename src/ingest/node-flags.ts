import v8 from 'node:v8';

/**
 * Node's flags for a sidecar process, on every path that starts one (the image's NODE_OPTIONS,
 * `npm start`, the demo, the benchmarks' scripts/sidecar.mjs; the README gives them for a start of
 * one's own). Young generation at most 3 × 8 MiB: V8's default lets it grow to 48 MiB (192 MiB on
 * Node 24 on a large host) under a burst of steps, and the sidecar's RSS with it (issue 24, target 1;
 * BENCHMARKS.md, "The young generation's size"). A V8 flag: it must be given at start, since
 * v8.setFlagsFromString after start does not resize the young generation.
 */
export const SIDECAR_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=8'];

/**
 * glibc's malloc settings for the sidecar process, on the same start paths (the image's ENV, `npm
 * start`, the demo, the benchmarks' scripts/sidecar.mjs; the README's own start). A fixed mmap
 * threshold: glibc otherwise raises it to the size of each large block freed, up to 32 MiB, so that
 * the journal's checkpoint lines (MiBs, every few seconds) and the hooks' larger frames land in its
 * main heap, which then holds their pages between live chunks. Fixed, a block of 128 KiB or more
 * generally gets its own mapping, returned when freed: 8 hooks at 10,000 steps/s for 5 minutes, the
 * journal on, peak RSS 187 -> 168 MiB, glibc's heap 27-33 -> 20 MiB flat (BENCHMARKS.md, "glibc's
 * mmap threshold"). Read by glibc as the process starts, so it must be in its environment; other C
 * libraries ignore it. A caller's own setting wins.
 */
export const SIDECAR_MALLOC_ENV: Readonly<Record<string, string>> = { MALLOC_MMAP_THRESHOLD_: '131072' };

/** NODE_OPTIONS as the image sets it (the Dockerfile's ENV): old space at half the container's memory limit, and the flags above. */
export const IMAGE_NODE_OPTIONS = ['--max-old-space-size-percentage=50', ...SIDECAR_NODE_FLAGS].join(' ');

/**
 * V8 flags the sidecar sets on itself as it starts serving: NODE_OPTIONS refuses them (Node allows
 * only a few V8 flags there), and V8 reads them as it runs. No allocation-site pretenuring: under a
 * burst of steps, the records of the frames waiting on the journal's fdatasync outlive a scavenge,
 * V8 then allocates every later record of that site straight in old space, and the old space's
 * collection of what dies there cost the collector's helper threads more than copying the few that
 * survive (ingest with the journal 1.43-1.48 -> 0.95-1.09 us a record; an 8-rank burst's
 * peak RSS 178-186 -> 167-169 MiB: BENCHMARKS.md, "The journal keeps the frame; no pretenuring").
 */
export const SIDECAR_RUNTIME_V8_FLAGS: readonly string[] = ['--no-allocation-site-pretenuring'];

export function setSidecarV8Flags(): void {
  for (const flag of SIDECAR_RUNTIME_V8_FLAGS) v8.setFlagsFromString(flag);
}
