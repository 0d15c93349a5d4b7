// The console's charts: one uPlot per measure, one series per model, fed with the server's
// history points (``/ui/api/live``). Each chart has a text line with the latest values, its
// accessible equivalent.
import { $, el, num, pct } from "./lib.js";

const KEEP = 300; // points kept, as the server keeps
const CHARTS = [
  { key: "decode_tps", title: "Decode speed", unit: "tok/s", fmt: (x) => num(x, 1) },
  { key: "acceptance", title: "Draft acceptance", unit: "accepted / drafted", fmt: pct, range: [0, 1] },
  { key: "tokens_per_step", title: "Tokens per draft step", unit: "tokens", fmt: (x) => num(x, 2) },
  { key: "rps", title: "Requests", unit: "per second", fmt: (x) => num(x, 2) },
  { key: "ttft_s", title: "Time to first token", unit: "ms", fmt: (x) => num(x * 1000, 0), scale: 1000 },
  { key: "queued", title: "Queue depth", unit: "waiting for a slot or a load (dashed: in flight)", fmt: (x) => num(x, 0),
    extra: "in_flight" },
];
const PALETTE = ["#2f7fd8", "#d8612f", "#2fa86a", "#a23fc4", "#c49a1f", "#d83f7f"];

function colors() {
  const css = getComputedStyle(document.documentElement);
  return { fg: css.getPropertyValue("--muted").trim(), grid: css.getPropertyValue("--grid").trim() };
}

export class Charts {
  constructor() {
    this.since = 0; // sequence number of the last point received
    this.view = null;
  }

  /** Forget every point and chart (the next poll asks for the whole history). */
  reset() {
    if (this.view) this.view.resize.disconnect();
    this.view = null;
    this.since = 0;
  }

  /** Add the server's new points for ``models`` (their names, in order). */
  add(points, models) {
    if (!this.view || this.view.models.join("\n") !== models.join("\n")) {
      const had = this.since;
      this.reset();
      this.build(models);
      if (had) return; // the model list changed: the next poll fetches the whole history
    }
    const v = this.view;
    for (const p of points) {
      v.xs.push(p.t);
      for (const chart of v.list) {
        let i = 0;
        for (const m of v.models) {
          const x = (p.models[m] || {})[chart.spec.key];
          chart.ys[i++].push(x === null || x === undefined ? null : x * (chart.spec.scale || 1));
          if (chart.spec.extra) chart.ys[i++].push((p.models[m] || {})[chart.spec.extra] ?? null);
        }
      }
      this.since = p.seq;
    }
    if (v.xs.length > KEEP) {
      const drop = v.xs.length - KEEP;
      v.xs.splice(0, drop);
      for (const chart of v.list) for (const y of chart.ys) y.splice(0, drop);
    }
    if (!points.length) return;
    for (const chart of v.list) {
      chart.chart.setData([v.xs, ...chart.ys]);
      chart.fig.dataset.points = String(v.xs.length);
      chart.latest.textContent = latestText(chart, v.models);
    }
  }

  build(models) {
    const box = $("charts");
    box.replaceChildren();
    const c = colors();
    const xs = [];
    const view = { xs, models, list: [] };
    for (const spec of CHARTS) {
      const latest = el("p", { class: "latest", "data-chart": spec.key, text: "no data yet" });
      const plot = el("div", { class: "plot", role: "img", "aria-label": `${spec.title} (${spec.unit}) per model` });
      const fig = el("figure", { class: "chart", "data-chart": spec.key, "data-points": "0" },
        el("figcaption", {}, el("strong", { text: spec.title }), " ", el("span", { class: "unit", text: spec.unit })),
        plot, latest);
      box.append(fig);
      const axis = { stroke: c.fg, grid: { stroke: c.grid, width: 1 }, ticks: { stroke: c.grid } };
      const series = [{}];
      const ys = [];
      models.forEach((m, i) => {
        series.push({ label: m, stroke: PALETTE[i % PALETTE.length], width: 2, spanGaps: false });
        ys.push([]);
        if (spec.extra) {
          series.push({ label: m + " in flight", stroke: PALETTE[i % PALETTE.length], width: 1, dash: [4, 4] });
          ys.push([]);
        }
      });
      const opts = {
        width: Math.max(240, plot.clientWidth || 300), height: 160, series,
        // local clock time only: uPlot's default adds a date line that crowds a small chart
        axes: [{ ...axis, space: 80, values: (_u, ticks) => ticks.map(clock) }, { ...axis, size: 48 }],
        scales: { x: { time: true }, y: spec.range ? { range: spec.range } : { auto: true } },
        legend: { show: models.length > 1 }, cursor: { drag: { x: false, y: false } },
      };
      // uPlot is the vendored library's global (vendor/uPlot.iife.min.js)
      view.list.push({ spec, chart: new uPlot(opts, [xs, ...ys], plot), ys, fig, latest });
    }
    view.resize = new ResizeObserver(() => {
      for (const ch of view.list) ch.chart.setSize({ width: Math.max(240, ch.fig.clientWidth - 16), height: 160 });
    });
    for (const ch of view.list) view.resize.observe(ch.fig);
    this.view = view;
  }
}

const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });

function latestText(chart, models) {
  const parts = [];
  let i = 0;
  for (const m of models) {
    const ys = chart.ys[i];
    let last = null;
    for (let j = ys.length - 1; j >= 0; j--) if (ys[j] !== null) { last = ys[j]; break; }
    parts.push(`${m}: ${last === null ? "–" : chart.spec.fmt(last / (chart.spec.scale || 1))}`);
    i += chart.spec.extra ? 2 : 1;
  }
  return "latest " + parts.join(", ");
}
