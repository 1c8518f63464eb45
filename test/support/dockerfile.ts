import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './sidecar.js';

/** The repository's Dockerfile read as text (no image can be built in `npm test`). */

export interface Instruction {
  keyword: string;
  args: string;
}

export interface Stage {
  name: string | null;
  /** FROM's image with the global ARGs' defaults put in, as a build without --build-arg sees it. */
  image: string;
  /** FROM's image as written. */
  written: string;
  instructions: Instruction[];
}

export interface Dockerfile {
  /** ARGs before the first FROM, with their defaults. */
  args: Map<string, string>;
  stages: Stage[];
}

export function parseDockerfile(text: string): Dockerfile {
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'));
  const args = new Map<string, string>();
  const stages: Stage[] = [];
  for (const line of lines) {
    const [, keyword, rest] = /^(\S+)\s+(.*)$/.exec(line)!;
    const upper = keyword!.toUpperCase();
    if (upper === 'FROM') {
      const [written, as, name] = rest!.split(/\s+/);
      const image = written!.replace(/\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g, (whole, arg: string) => args.get(arg) ?? whole);
      stages.push({ image, written: written!, name: as?.toUpperCase() === 'AS' ? name! : null, instructions: [] });
    } else if (stages.length === 0 && upper === 'ARG') {
      const [name, value = ''] = rest!.split('=');
      args.set(name!, value);
    } else {
      stages.at(-1)!.instructions.push({ keyword: upper, args: rest! });
    }
  }
  return { args, stages };
}

export const DOCKERFILE = path.join(ROOT, 'Dockerfile');
export const dockerfile = (): Dockerfile => parseDockerfile(readFileSync(DOCKERFILE, 'utf8'));

/** The final stage's ENV settings, in order (ENV A=1 B=2 and the old ENV A 1 form). */
export function envOf(stage: Stage): Map<string, string> {
  const env = new Map<string, string>();
  for (const { keyword, args } of stage.instructions) {
    if (keyword !== 'ENV') continue;
    if (!args.includes('=')) {
      const [name, ...value] = args.split(/\s+/);
      env.set(name!, value.join(' '));
      continue;
    }
    for (const [, name, value] of args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)/g)) env.set(name!, value!.replace(/^"|"$/g, ''));
  }
  return env;
}
