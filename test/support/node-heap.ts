import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './sidecar.js';

/**
 * V8's heap as Node sizes it under a container's memory limit, measured (test/fixtures/node-heap.json,
 * `node scripts/pod-ci.mjs heap`): no model of V8's sizing is trusted here, since it changes between
 * Node versions and with the memory it is shown.
 */

interface Measured {
  node: string;
  limit: string;
  /** The request as a soft limit (podman kube play sets one; a cluster does not): '' for none. */
  request: string;
  node_options: string;
  heap_size_limit: number;
}

const FILE = path.join(ROOT, 'test', 'fixtures', 'node-heap.json');
const measured = (JSON.parse(readFileSync(FILE, 'utf8')) as { measured: Measured[] }).measured;

/** The heap_size_limit measured for Node `major` under `limit` (a Kubernetes quantity; `request` as a soft limit, or '') with NODE_OPTIONS `options`. */
export function measuredHeap(major: string, limit: string, options: string, request = ''): number {
  const found = measured.find((m) => m.node.split('.')[0] === major && m.limit === limit && m.request === request && m.node_options === options);
  if (!found) {
    const under = request ? `${limit} (soft limit ${request})` : limit;
    throw new Error(`no heap measured for Node ${major} under ${under} with NODE_OPTIONS="${options}": measure it with \`node scripts/pod-ci.mjs heap > ${path.relative(ROOT, FILE)}\` (it measures what the shipped manifests declare)`);
  }
  return found.heap_size_limit;
}
