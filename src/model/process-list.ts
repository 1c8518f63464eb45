/**
 * "./gpu_burn (pid 11345) 15690 MiB, /root/tools/memhog (pid 11327) 2566 MiB and 1 more": processes
 * with what each holds or uses, the first `limit` named. One wording for the rules, the summary and the viewer.
 */
export function processList(processes: ReadonlyArray<{ pid: number; name: string; figure: string | null }>, limit = 3): string {
  const shown = processes.slice(0, limit).map((p) => `${p.name} (pid ${p.pid})${p.figure === null ? '' : ` ${p.figure}`}`);
  const more = processes.length - shown.length;
  return `${shown.join(', ')}${more > 0 ? ` and ${more} more` : ''}`;
}
