import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT, tempDir } from './sidecar.js';

export const FAKE_NVIDIA_SMI = path.join(ROOT, 'test', 'support', 'fake-nvidia-smi.mjs');

/** A directory holding the stand-in under the name `nvidia-smi`, put in front of PATH. */
export function pathWithFakeNvidiaSmi(dir: string): string {
  const bin = path.join(dir, 'bin');
  mkdirSync(bin, { recursive: true });
  symlinkSync(FAKE_NVIDIA_SMI, path.join(bin, 'nvidia-smi'));
  return `${bin}${path.delimiter}${process.env.PATH ?? ''}`;
}

/** Environment that makes `nvidia-smi` on PATH the stand-in playing `scenario` (see fake-nvidia-smi.mjs). */
export function fakeNvidiaSmiEnv(scenario: object | ((dir: string) => object)): { env: NodeJS.ProcessEnv; dir: string } {
  const dir = tempDir('stepscope-fake-gpu-');
  const scenarioFile = path.join(dir, 'scenario.json');
  writeFileSync(scenarioFile, JSON.stringify(typeof scenario === 'function' ? scenario(dir) : scenario));
  return { dir, env: { PATH: pathWithFakeNvidiaSmi(dir), FAKE_NVIDIA_SMI_SCENARIO: scenarioFile } };
}
