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

  /** Oldest first. */
  toArray(): T[] {
    if (this.items.length < this.capacity) return this.items.slice();
    return [...this.items.slice(this.next), ...this.items.slice(0, this.next)];
  }
}

/** Nearest-rank percentile of already sorted values; NaN when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}
