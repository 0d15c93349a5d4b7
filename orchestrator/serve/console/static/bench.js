// The last `orchestrator bench` report: its table, analysis and plot (fetched with the key).
import { $, api, el, getJSON } from "./lib.js";

const COLUMNS = [["k", "K"], ["domain", "prompts"], ["requests", "requests"], ["tps_median", "decode tok/s"],
  ["ttft_median", "TTFT s"], ["acceptance", "acceptance"], ["tokens_per_step", "tokens/step"],
  ["speedup", "speedup"]];

export async function loadBench() {
  const box = $("bench");
  let b;
  try {
    b = await getJSON("/ui/api/bench");
  } catch (err) {
    box.replaceChildren(el("p", { class: "error", text: "cannot read the bench report: " + err.message }));
    return;
  }
  if (!b.found) {
    const why = b.error || `No report in ${b.searched}. Run \`orchestrator bench\` to make one.`;
    box.replaceChildren(el("p", { class: "muted", text: why }));
    return;
  }
  const head = el("tr", {});
  for (const [, label] of COLUMNS) head.append(el("th", { scope: "col", text: label }));
  const body = el("tbody", {});
  for (const row of b.rows) {
    const tr = el("tr", {});
    for (const [k] of COLUMNS) {
      const v = row[k];
      tr.append(el("td", { text: typeof v === "number" && !Number.isInteger(v) ? v.toFixed(2) : String(v ?? "–") }));
    }
    body.append(tr);
  }
  const parts = [
    el("p", { text: `${b.model} · ${b.finished_at} · recommended K = ${b.recommended_k} · ${b.folder}` }),
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, head), body)),
  ];
  if (b.analysis.length) parts.push(el("ul", {}, ...b.analysis.map((a) => el("li", { text: a }))));
  if (b.has_plot) {
    // an <img src> cannot send the key header: fetch it and show it from memory (CSP img-src blob:)
    const img = el("img", { class: "bench-plot", alt: `decode tok/s and acceptance by K for ${b.model}` });
    api("/ui/api/bench/plot").then((r) => r.blob()).then((blob) => { img.src = URL.createObjectURL(blob); })
      .catch(() => img.remove());
    parts.push(img);
  }
  box.replaceChildren(...parts);
}

export function initBench() {
  $("bench-refresh").addEventListener("click", () => loadBench());
}
