// parse-prometheus-text-format 1.1.1 ships no types. Only what its README documents and its code returns.
declare module 'parse-prometheus-text-format' {
  namespace parsePrometheusTextFormat {
    interface Sample {
      /** Absent on the _sum/_count/_bucket lines of summaries and histograms. */
      value?: string;
      labels?: Record<string, string>;
      timestamp_ms?: string;
      count?: string;
      sum?: string;
      buckets?: Record<string, string>;
      quantiles?: Record<string, string>;
    }

    interface MetricFamily {
      name: string;
      help: string;
      /** Upper case: GAUGE, COUNTER, SUMMARY, HISTOGRAM or UNTYPED. */
      type: string;
      metrics: Sample[];
    }
  }

  /** Throws `InvalidLineError` on a line it cannot read. */
  function parsePrometheusTextFormat(text: string): parsePrometheusTextFormat.MetricFamily[];

  export = parsePrometheusTextFormat;
}
