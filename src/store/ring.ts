/** Fixed-capacity buffer that keeps the newest values. */
export class Ring<T> {
  private readonly items: T[] = [];
  private next = 0;

  constructor(readonly capacity: number) {}

  push(item: T): void {
    if (this.items.length < this.capacity) {
      this.items.push(item);
    } else {
      this.items[this.next] = item;
    }
    this.next = (this.next + 1) % this.capacity;
  }

  get size(): number {
    return this.items.length;
  }

  static of<T>(capacity: number, items: readonly T[]): Ring<T> {
    const ring = new Ring<T>(capacity);
    for (const item of items.slice(-capacity)) ring.push(item);
    return ring;
  }

  /**
   * The items with `from <= time(item) <= to`, in the order pushed, for items pushed in about time
   * order: walks back from the newest and stops once past `from` by more than `slackMs` (samples of
   * one GPU forwarded by two processes interleave a little), so a short window costs what it holds.
   */
  between(from: number, to: number, time: (item: T) => number, slackMs = 10_000): T[] {
    const out: T[] = [];
    const n = this.items.length;
    for (let k = 1; k <= n; k++) {
      const item = this.items[(this.next - k + n * 2) % n]!;
      const at = time(item);
      if (at < from - slackMs) break;
      if (at >= from && at <= to) out.push(item);
    }
    return out.reverse();
  }

  /** Oldest first. */
  toArray(): T[] {
    const n = this.items.length;
    if (n < this.capacity) return this.items.slice();
    // One copy, not two slices and a spread of them: every rank's recent steps are read several times a tick.
    const out = new Array<T>(n);
    for (let i = 0; i < n; i++) out[i] = this.items[(this.next + i) % n]!;
    return out;
  }
}

/**
 * The values in ascending order, for `percentile`: a typed array sorts numbers natively, where a
 * comparator is called about 2,000 times for 256 steps (each rank's recent steps, at every tick).
 */
export function sortedAscending(values: ArrayLike<number>): Float64Array {
  return Float64Array.from(values).sort();
}

/** Nearest-rank percentile of already sorted values; NaN when empty. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}
