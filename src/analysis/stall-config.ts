/** When a rank counts as stalled: its own file, light to import, so the CLI's --help shows the defaults without the analysis. */

export interface StallConfig {
  /** A rank is stalled after this many of its median steps without one ... */
  steps: number;
  /** ... and never before this, ms. */
  floorMs: number;
}

export const STALL_DEFAULTS: StallConfig = { steps: 3, floorMs: 10_000 };
