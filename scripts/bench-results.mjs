// The figures `npm run bench:check` keeps and judges: flat names (`start.help_ratio_to_bare_node`)
// to numbers, written to bench-results/latest.json (not committed) and checked against the budgets
// committed in bench-budgets.json. Each budget is a ceiling or a floor; where timing is noisy it is a
// ratio against a baseline measured in the same run, so a loaded machine moves both sides.
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * CPU seconds of a live process: its threads' run time in ns from /proc/PID/task/TID/schedstat, where
 * /proc/PID/stat counts 10 ms ticks (a 50 ms round would be judged to a fifth). A thread that has
 * exited is no longer counted: the sidecar's threads (its event loop, V8's and libuv's) live as long
 * as it does. From /proc/PID/stat where schedstat reads nothing.
 */
export function cpuSeconds(pid) {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch (error) {
      // A thread that exited between the listing and the read.
      if (error.code !== 'ENOENT' && error.code !== 'ESRCH') throw error;
    }
  }
  if (ns > 0) return ns / 1e9;
  // No schedstat (a kernel without it reads 0): /proc/PID/stat's ticks.
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

export function writeResults(file, results) {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(results, null, 2) + '\n');
}

export const readJson = (file) => JSON.parse(readFileSync(file, 'utf8'));

/**
 * Each budget against its figure: `{ name, value, max | min, ok, why }`. A budget with no figure is
 * a failure too (a benchmark that stopped reporting must not pass silently).
 */
export function judge(figures, budgets) {
  return Object.entries(budgets).map(([name, budget]) => {
    const value = figures[name];
    const known = typeof value === 'number' && Number.isFinite(value);
    const ok = known && (budget.max === undefined || value <= budget.max) && (budget.min === undefined || value >= budget.min);
    return { name, value: known ? value : null, max: budget.max ?? null, min: budget.min ?? null, ok, why: budget.why };
  });
}
