import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { parseInput } from '../protocol/parse.js';

/**
 * The few calls of Prometheus's HTTP API (v1) that the job-wide report and the fleet view make
 * (Thanos and Mimir answer the same API). Every answer is checked whole against its schema before
 * use; what goes wrong says so, with the address: unreachable, refused, or not Prometheus.
 */

const Labels = Type.Record(Type.String(), Type.String(), { description: "a series' labels" });
/** Prometheus writes sample values as strings ("1.5", "NaN", "+Inf"). */
const Sample = Type.Tuple([Type.Number({ description: 'Unix time, s' }), Type.String({ description: 'the value' })]);

const VectorSchema = Type.Object({ resultType: Type.Literal('vector'), result: Type.Array(Type.Object({ metric: Labels, value: Sample })) });
const MatrixSchema = Type.Object({ resultType: Type.Literal('matrix'), result: Type.Array(Type.Object({ metric: Labels, values: Type.Array(Sample) })) });
const LabelValuesSchema = Type.Array(Type.String());

const Answer = <T extends TSchema>(data: T) =>
  Type.Union([
    Type.Object({ status: Type.Literal('success'), data, warnings: Type.Optional(Type.Array(Type.String())) }),
    Type.Object({ status: Type.Literal('error'), errorType: Type.String(), error: Type.String() }),
  ]);

const VectorAnswer = Answer(VectorSchema);
const MatrixAnswer = Answer(MatrixSchema);
const LabelValuesAnswer = Answer(LabelValuesSchema);

export type Vector = Static<typeof VectorSchema>['result'];
export type Matrix = Static<typeof MatrixSchema>['result'];

export class PrometheusError extends Error {
  override name = 'PrometheusError';
}

/** A sample's value as a number (NaN for what Prometheus writes as NaN). */
export const value = (sample: readonly [number, string]): number => Number(sample[1]);

export class PrometheusClient {
  private readonly base: URL;

  constructor(
    url: string,
    private readonly timeoutMs = 60_000,
  ) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new PrometheusError(`${url} is not a URL: give Prometheus's address, such as http://prometheus:9090`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new PrometheusError(`${url}: Prometheus is reached over http or https`);
    // A path prefix (Prometheus behind a proxy, Mimir's /prometheus) is kept.
    this.base = new URL(parsed.href.endsWith('/') ? parsed.href : `${parsed.href}/`);
  }

  get url(): string {
    return this.base.href.replace(/\/$/, '');
  }

  private async get<T extends TSchema>(path: string, params: Record<string, string>, schema: T, what: string): Promise<Static<T>> {
    const url = new URL(path, this.base);
    for (const [key, val] of Object.entries(params)) url.searchParams.set(key, val);
    let response: Response;
    try {
      response = await fetch(url, { signal: AbortSignal.timeout(this.timeoutMs), headers: { accept: 'application/json' } });
    } catch (error) {
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      throw new PrometheusError(`cannot reach Prometheus at ${this.url}: ${cause?.code ?? cause?.message ?? (error as Error).message}`);
    }
    const text = await response.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new PrometheusError(`${this.url} answered ${response.status} ${response.statusText} with something other than JSON: is it Prometheus's address?`);
    }
    let answer: Static<T>;
    try {
      answer = parseInput(schema, body, what);
    } catch (error) {
      throw new PrometheusError(`${this.url} did not answer as Prometheus's API does (${(error as Error).message})`);
    }
    const checked = answer as { status: 'success'; data: unknown } | { status: 'error'; errorType: string; error: string };
    if (checked.status === 'error') throw new PrometheusError(`Prometheus at ${this.url} refused ${what}: ${checked.errorType}: ${checked.error}`);
    return answer;
  }

  /** An instant query at `at` (Unix s). */
  async query(expr: string, at: number): Promise<Vector> {
    const answer = await this.get('api/v1/query', { query: expr, time: String(at) }, VectorAnswer, 'query');
    return answer.status === 'success' ? answer.data.result : [];
  }

  /** A range query from `from` to `to` (Unix s) every `step` s. */
  async queryRange(expr: string, from: number, to: number, step: number): Promise<Matrix> {
    const answer = await this.get('api/v1/query_range', { query: expr, start: String(from), end: String(to), step: String(step) }, MatrixAnswer, 'query_range');
    return answer.status === 'success' ? answer.data.result : [];
  }

  /** The values a label takes over series matching `match` from `from` to `to`. */
  async labelValues(label: string, match: string, from: number, to: number): Promise<string[]> {
    const answer = await this.get(`api/v1/label/${encodeURIComponent(label)}/values`, { 'match[]': match, start: String(from), end: String(to) }, LabelValuesAnswer, 'label values');
    return answer.status === 'success' ? answer.data : [];
  }
}

/** A label value as a PromQL string literal. */
export function promString(text: string): string {
  return JSON.stringify(text);
}
