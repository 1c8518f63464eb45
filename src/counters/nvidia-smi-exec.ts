import { execFile, type ExecFileException } from 'node:child_process';

/** One nvidia-smi call, its output read whole: the probe, the inventory and the compute processes each ask this way. */

const MAX_OUTPUT_BYTES = 1 << 20;

export type ExecResult = { ok: true; stdout: string } | { ok: false; reason: string; output: string; stdout: string; code: number | null };

export function execOnce(binary: string, args: string[], options: { env: NodeJS.ProcessEnv | undefined; timeoutMs: number; signal?: AbortSignal }): Promise<ExecResult> {
  return new Promise((resolve) => {
    execFile(
      binary,
      args,
      { env: options.env, timeout: options.timeoutMs, killSignal: 'SIGKILL', maxBuffer: MAX_OUTPUT_BYTES, encoding: 'utf8', signal: options.signal },
      (error, stdout, stderr) => {
        if (!error) return resolve({ ok: true, stdout });
        const output = `${stdout}\n${stderr}`.trim();
        const code = typeof error.code === 'number' && !error.killed ? error.code : null;
        resolve({ ok: false, reason: execFailure(binary, error, output, options.timeoutMs), output, stdout, code });
      },
    );
  });
}

function execFailure(binary: string, error: ExecFileException, output: string, timeoutMs: number): string {
  if (error.code === 'ENOENT') return `"${binary}" not found (is the NVIDIA driver installed and nvidia-smi on PATH?)`;
  if (error.code === 'EACCES') return `"${binary}" is not executable`;
  if (error.killed) return `"${binary}" gave no answer within ${timeoutMs} ms`;
  const status = typeof error.code === 'number' ? `exit ${error.code}` : `signal ${error.signal ?? error.code ?? 'unknown'}`;
  return `"${binary}" failed (${status}): ${firstLine(output) || error.message}`;
}

export function firstLine(text: string): string {
  return text.split('\n').find((line) => line.trim())?.trim() ?? '';
}
