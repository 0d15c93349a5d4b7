// Prompt-cache hits per client session (Claude Code's session id, prompt_cache_key, else the
// conversation's opening): per model, the latest sessions and how much of their prompts the
// cache held.
import { $, el } from "./lib.js";

const COLUMNS = [["session", "session"], ["requests", "requests"], ["hit_rate", "cached share"],
  ["cached_tokens", "cached tokens"], ["processed_tokens", "processed tokens"], ["last", "last request"],
  ["cache_broken_by", "system prompt changed at"]];

/** ``info``: ``{model: [{session, requests, hit_rate, cached_tokens, processed_tokens, last, seen,
 * cache_broken_by}]}``; ``cache_broken_by``: the system-prompt line that changed between two requests
 * of the session (everything after it was processed again), or null. */
export function renderSessions(info) {
  const models = Object.entries(info || {}).filter(([, rows]) => rows.length);
  $("sessions-section").hidden = !models.length;
  if (!models.length) return;
  const head = el("tr", {}, el("th", { scope: "col", text: "model" }));
  for (const [, label] of COLUMNS) head.append(el("th", { scope: "col", text: label }));
  const body = el("tbody", {});
  for (const [model, rows] of models) {
    for (const s of rows) {
      const row = el("tr", { "data-model": model }, el("td", { text: model }));
      for (const [key] of COLUMNS) row.append(el("td", { text: cell(key, s[key]) }));
      body.append(row);
    }
  }
  $("sessions").replaceChildren(el("thead", {}, head), body);
}

function cell(key, v) {
  if (key === "hit_rate") return v == null ? "–" : Math.round(100 * v) + "%";
  if (key === "last") return v ? `${v.cached_tokens} cached, ${v.processed_tokens} processed` : "–";
  if (key === "cache_broken_by") return v ? `line ${v.line_number} (${v.times}×): ${v.line}` : "–";
  return String(v ?? "–");
}
