#!/usr/bin/env node
// A stand-in for kubectl in the viewer's tests: `get pods` prints FAKE_KUBECTL_PODS; `port-forward
// pod/NAME :PORT` says it forwards to the local port FAKE_KUBECTL_PORTS[NAME] (a sidecar the test
// started), writes its pid to FAKE_KUBECTL_DIR/NAME.pid, and stays up until killed, as kubectl does;
// FAKE_KUBECTL_DELAY_MS holds back its "Forwarding" line that long (a slow cluster);
// FAKE_KUBECTL_GET_DELAY_MS holds back the pod list that long, its pid in FAKE_KUBECTL_DIR/get.pid.
import { writeFileSync } from 'node:fs';
import path from 'node:path';

const [command, target] = process.argv.slice(2);
if (command === 'get') {
  const delay = Number(process.env.FAKE_KUBECTL_GET_DELAY_MS ?? 0);
  if (delay > 0) writeFileSync(path.join(process.env.FAKE_KUBECTL_DIR, 'get.pid'), String(process.pid));
  setTimeout(() => process.stdout.write(process.env.FAKE_KUBECTL_PODS ?? '{"items":[]}'), delay);
} else if (command === 'port-forward') {
  const name = target.replace(/^pod\//, '');
  const port = JSON.parse(process.env.FAKE_KUBECTL_PORTS ?? '{}')[name];
  if (!port) {
    process.stderr.write(`error: pods "${name}" not found\n`);
    process.exit(1);
  }
  writeFileSync(path.join(process.env.FAKE_KUBECTL_DIR, `${name}.pid`), String(process.pid));
  setTimeout(() => process.stdout.write(`Forwarding from 127.0.0.1:${port} -> 9477\n`), Number(process.env.FAKE_KUBECTL_DELAY_MS ?? 0));
  setInterval(() => undefined, 60_000);
} else {
  process.stderr.write(`fake kubectl: ${command}?\n`);
  process.exit(1);
}
