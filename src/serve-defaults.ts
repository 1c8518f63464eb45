/** `serve`'s defaults that live nowhere lighter, so the CLI shows them in --help without loading the sidecar. */

/** Hard cap on the journal's bytes under --out. */
export const DEFAULT_JOURNAL_MAX_BYTES = 512 * 1024 * 1024;
