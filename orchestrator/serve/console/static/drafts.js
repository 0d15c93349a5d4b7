// The draft-length policy's last choices (models with speculative.adaptive): per request, its
// class, the K chosen and why, and what the answer did (decode tok/s, drafts accepted).
import { $, el } from "./lib.js";

const COLUMNS = [["at", "time"], ["class", "request class"], ["k", "K"], ["reason", "why"],
  ["tokens_per_second", "tok/s"], ["accepted", "accepted/drafted"]];

/** ``info``: ``{model: {ks, recent: [{at, class, k, reason, expected, tokens_per_second, accepted}]}}``. */
export function renderDrafts(info) {
  const models = Object.entries(info || {});
  $("drafts-section").hidden = !models.length;
  if (!models.length) return;
  const head = el("tr", {}, el("th", { scope: "col", text: "model" }));
  for (const [, label] of COLUMNS) head.append(el("th", { scope: "col", text: label }));
  const body = el("tbody", {});
  for (const [model, policy] of models) {
    for (const choice of policy.recent.slice(0, 12)) {
      const row = el("tr", { "data-model": model, "data-k": String(choice.k) }, el("td", { text: model }));
      for (const [key] of COLUMNS) {
        const v = key === "at" ? new Date(1000 * choice.at).toLocaleTimeString() : choice[key];
        row.append(el("td", { text: String(v ?? "–"), title: key === "k" ? expected(choice.expected) : "" }));
      }
      body.append(row);
    }
  }
  $("drafts").replaceChildren(el("thead", {}, head), body);
}

function expected(byK) {
  return byK ? "expected tok/s: " + Object.entries(byK).map(([k, v]) => `K=${k} ${v}`).join(", ") : "";
}
