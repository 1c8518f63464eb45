/** `value` rounded to `digits` decimal places (half away from zero for positive values, as Math.round). */
export function round(value: number, digits: number): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}
