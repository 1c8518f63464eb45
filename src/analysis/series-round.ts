/** Three significant digits: enough for a chart, a third of the bytes of a double. */
export function sig3(x: number): number {
  return x === 0 || !Number.isFinite(x) ? x : Number(x.toPrecision(3));
}
