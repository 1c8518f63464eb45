/**
 * Step-time distribution over a whole job in fixed memory: log-spaced buckets 2% wide from 1 µs to
 * about 3 hours, so any percentile is within 2% of the truth however many steps there are.
 */
const MIN_MS = 0.001;
const GROWTH = 1.02;
const BUCKETS = Math.ceil(Math.log(1e7 / MIN_MS) / Math.log(GROWTH));
/** The highest bucket index (a checkpoint's pairs are checked against it). */
export const HISTOGRAM_TOP = BUCKETS;
const LOG_GROWTH = Math.log(GROWTH);

export class LogHistogram {
  private readonly counts = new Uint32Array(BUCKETS + 1);
  count = 0;

  add(ms: number): void {
    const index = ms <= MIN_MS ? 0 : Math.min(BUCKETS, Math.floor(Math.log(ms / MIN_MS) / LOG_GROWTH) + 1);
    this.counts[index]! += 1;
    this.count += 1;
  }

  /** The non-empty buckets as [index, count] pairs, for a checkpoint. */
  dump(): Array<[number, number]> {
    const pairs: Array<[number, number]> = [];
    this.counts.forEach((count, i) => count && pairs.push([i, count]));
    return pairs;
  }

  /** A histogram holding what `dump` gave (its indexes checked by the checkpoint's schema). */
  static load(pairs: ReadonlyArray<readonly [number, number]>): LogHistogram {
    const histogram = new LogHistogram();
    for (const [i, count] of pairs) {
      histogram.counts[i] = count;
      histogram.count += count;
    }
    return histogram;
  }

  merge(other: LogHistogram): void {
    for (let i = 0; i < this.counts.length; i++) this.counts[i]! += other.counts[i]!;
    this.count += other.count;
  }

  /** The q-quantile (0..1), as the geometric middle of its bucket; null when empty. */
  quantile(q: number): number | null {
    if (this.count === 0) return null;
    const target = Math.max(1, Math.ceil(q * this.count));
    let seen = 0;
    for (let i = 0; i < this.counts.length; i++) {
      seen += this.counts[i]!;
      if (seen >= target) return i === 0 ? MIN_MS : MIN_MS * GROWTH ** (i - 0.5);
    }
    return null;
  }
}
