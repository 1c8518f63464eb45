import { Counter, Gauge, type Registry } from 'prom-client';

export type Labels<L extends string> = Record<L, string | number>;
/** One series: its labels and its value; a null value leaves the series out (not reported). */
export type Sample<L extends string> = readonly [Labels<L>, number | null];

export interface Family<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
  /** Read at scrape time; every scrape replaces the series, so those that went away disappear. */
  samples: () => Iterable<Sample<L>>;
}

export function gaugeFamily<L extends string>(registry: Registry, family: Family<L>): void {
  new Gauge<L>({
    name: family.name,
    help: family.help,
    labelNames: family.labelNames,
    registers: [registry],
    collect() {
      this.reset();
      // reset() leaves a gauge without labels at 0, and a figure not known must not read as zero.
      if (family.labelNames.length === 0) this.remove();
      for (const [labels, value] of family.samples()) if (value !== null) this.set(labels, value);
    },
  });
}

/** A counter whose cumulative value is kept elsewhere (the store, the ingest stats) and read at scrape time. */
export function counterFamily<L extends string>(registry: Registry, family: Family<L>): void {
  new Counter<L>({
    name: family.name,
    help: family.help,
    labelNames: family.labelNames,
    registers: [registry],
    collect() {
      this.reset();
      for (const [labels, value] of family.samples()) if (value !== null) this.inc(labels, value);
    },
  });
}
