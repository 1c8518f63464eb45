/** The run history's default size, light to import: the CLI's --help shows it without loading the history. */

/** Runs of the same job kept on disk, newest first (--history-keep). */
export const DEFAULT_HISTORY_KEEP = 20;
