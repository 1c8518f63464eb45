/** The run comparison's default threshold, light to import: the CLI's --help shows it without loading the engine. */
export const DEFAULT_REGRESSION_THRESHOLD_PCT = 10;
