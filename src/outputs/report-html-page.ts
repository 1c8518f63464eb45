/**
 * The report page's own script and style, inlined into each report. The script only draws the
 * chart specs (report-html-charts.ts) with uPlot; everything else is plain HTML made on the server.
 * It is browser JavaScript kept in a string (the sidecar's TypeScript has no DOM): tested in
 * headless Chromium (test/report-html.test.ts). Errors are counted on <html data-errors>, so a
 * headless browser's DOM says whether the page drew without one.
 */

export const HEAD_SCRIPT = `
(function () {
  var errors = (window.__stepscopeErrors = []);
  var mark = function () { document.documentElement.setAttribute('data-errors', String(errors.length)); };
  window.addEventListener('error', function (e) { errors.push(String(e.message || e)); mark(); });
  var original = console.error.bind(console);
  console.error = function () { errors.push(Array.prototype.join.call(arguments, ' ')); mark(); original.apply(null, arguments); };
})();
`;

export const PAGE_SCRIPT = `
(function () {
  var specs = JSON.parse(document.getElementById('stepscope-charts').textContent);
  var HEIGHT = 240;

  function background(spec) {
    return function (u) {
      var ctx = u.ctx;
      ctx.save();
      ctx.fillStyle = 'rgba(214, 39, 40, 0.12)';
      spec.spans.forEach(function (s) {
        var a = u.valToPos(s.from, 'x', true);
        var b = u.valToPos(s.to, 'x', true);
        ctx.fillRect(a, u.bbox.top, Math.max(1, b - a), u.bbox.height);
      });
      ctx.restore();
    };
  }

  function foreground(spec) {
    return function (u) {
      var ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = '#d62728';
      ctx.fillStyle = '#d62728';
      ctx.setLineDash([4, 3]);
      ctx.font = (12 * devicePixelRatio) + 'px sans-serif';
      spec.markers.forEach(function (m) {
        var x = u.valToPos(m.at, 'x', true);
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.fillText(m.label, x + 4, u.bbox.top + 14 * devicePixelRatio);
      });
      ctx.restore();
    };
  }

  function options(spec, width) {
    var series = [{}];
    spec.lines.forEach(function (line) {
      series.push({
        label: line.label,
        stroke: line.colour,
        width: line.width,
        dash: line.dash || undefined,
        fill: line.fill ? line.colour + 'cc' : undefined,
        scale: line.axis === 'right' ? 'right' : 'y',
        spanGaps: false,
        value: line.raw
          ? function (u, v, si, i) { var r = i == null ? null : line.raw[i]; return r == null ? '–' : r.toFixed(2); }
          : function (u, v) { return v == null ? '–' : (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(1)); },
      });
    });
    var y = { auto: true };
    if (spec.min !== null || spec.max !== null) {
      y.range = function (u, min, max) {
        return [spec.min !== null ? Math.min(spec.min, min) : min, spec.max !== null ? Math.max(spec.max, max) : max];
      };
    }
    var axes = [{}, { label: spec.unit, scale: 'y' }];
    var scales = { x: { time: true }, y: y };
    if (spec.rightUnit) {
      axes.push({ label: spec.rightUnit, scale: 'right', side: 1, grid: { show: false } });
      scales.right = { auto: true };
    }
    return {
      width: width,
      height: HEIGHT,
      series: series,
      axes: axes,
      scales: scales,
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      hooks: { drawClear: [background(spec)], draw: [foreground(spec)] },
    };
  }

  var plots = [];
  specs.forEach(function (spec) {
    var box = document.getElementById('chart-' + spec.id);
    var target = box.querySelector('.plot');
    var data = [spec.x].concat(spec.lines.map(function (l) { return l.values; }));
    var plot = new uPlot(options(spec, target.clientWidth || 900), data, target);
    plots.push({ plot: plot, target: target });
    box.setAttribute('data-points', String(spec.points));
    box.setAttribute('data-drawn', '1');
  });

  var resizing = null;
  window.addEventListener('resize', function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () {
      plots.forEach(function (p) { p.plot.setSize({ width: p.target.clientWidth, height: HEIGHT }); });
    }, 100);
  });
  document.documentElement.setAttribute('data-errors', String(window.__stepscopeErrors.length));
  document.documentElement.setAttribute('data-ready', '1');
})();
`;

export const PAGE_CSS = `
:root { color-scheme: light; --ink: #1d2329; --dim: #5b6670; --line: #d9dee3; --card: #fff; --bg: #f4f6f8; --bad: #c62828; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 24px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 10px; }
h3 { font-size: 15px; margin: 0 0 2px; }
.meta, .note { color: var(--dim); }
.note { margin: 0 0 6px; font-size: 13px; }
section, .chart { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px; margin: 14px 0; }
.headline { font-size: 16px; font-weight: 600; border-left: 6px solid var(--verdict, #888); padding-left: 10px; margin: 12px 0 0; }
.regression { background: #fdecea; border-color: #f5c2c0; color: #8a1c1c; font-weight: 600; }
.stops { background: #fff4f4; border-color: #f1b0b7; }
.stop { border-left: 6px solid var(--verdict, #5c0011); padding-left: 10px; margin: 8px 0; }
.stop p { margin: 2px 0; }
.stop p:first-child { font-weight: 600; }
.regression p { margin: 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--dim); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.straggler td { color: var(--bad); font-weight: 600; }
.timeline { display: flex; height: 28px; border-radius: 4px; overflow: hidden; border: 1px solid var(--line); }
.timeline div { height: 100%; min-width: 1px; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 14px; margin-top: 8px; font-size: 13px; }
.legend span::before { content: ''; display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; background: var(--c); vertical-align: -1px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 8px 18px; }
.figure b { display: block; font-size: 18px; }
.plot { width: 100%; }
pre { white-space: pre-wrap; font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; margin: 0; }
ol { margin: 0; padding-left: 20px; }
footer { color: var(--dim); font-size: 12px; margin-top: 24px; }
`;
