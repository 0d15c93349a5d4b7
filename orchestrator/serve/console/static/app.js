// The orchestrator console: key prompt, polling, the model cards and their controls.
// ES modules, no build step; uPlot (vendor/) draws the charts. The DOM is built with textContent
// only: nothing from the server is parsed as HTML.
import { $, auth, bytes, duration, el, getJSON, num, pct, postJSON } from "./lib.js";
import { loadBench, initBench } from "./bench.js";
import { Charts } from "./charts.js";
import { initChat } from "./chat.js";
import { renderDrafts } from "./drafts.js";
import { renderSessions } from "./sessions.js";
import { LogTail } from "./logs.js";

const state = {
  interval: 2000, // ms between polls (the server says)
  models: [], // canonical /v1/models entries, merged with the lifecycle rows when the server has them
  instances: [], // /status rows with resident memory
  timer: null,
};
const charts = new Charts();
const logTail = new LogTail();

// ------------------------------------------------------------------ key prompt

function askForKey(error) {
  stopPolling();
  auth.set("");
  $("main").hidden = true;
  $("forget-key").hidden = true;
  $("key-prompt").hidden = false;
  $("key-error").textContent = error || "";
  $("conn").textContent = "locked";
  $("conn-time").textContent = "";
  $("key-input").focus();
}
auth.onLocked = askForKey;

$("key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  auth.set($("key-input").value.trim());
  $("key-input").value = "";
  start();
});
$("forget-key").addEventListener("click", () => askForKey(""));

// ------------------------------------------------------------------ models

const MODEL_FIELDS = [ // optional lifecycle fields of a model, shown when the server sends them
  ["devices", "Device", (d) => d.map((x) => (x === "cpu" ? "CPU" : "GPU " + x)).join(", ")],
  ["memory_bytes", "Memory (estimate)", bytes],
  ["load_progress", "Loading", pct],
  ["idle_s", "Idle for", duration],
  ["unload_in_s", "Unloads in", duration],
  ["ttl_s", "Idle unload after", duration],
  ["pinned", "Pinned", (x) => (x ? "yes" : "no")],
  ["queued", "Requests waiting", String],
];
const RUNNING = ["ready", "degraded", "loading", "restarting"];
const LOADABLE = ["unloaded", "stopped", "failed"];

function renderModels() {
  const box = $("models");
  const names = new Set(state.models.map((m) => m.id));
  for (const card of [...box.children]) if (!names.has(card.dataset.model)) card.remove();
  for (const model of state.models) {
    let card = box.querySelector(`[data-model="${CSS.escape(model.id)}"]`);
    if (!card) {
      card = modelCard(model.id);
      box.append(card);
    }
    updateCard(card, model);
  }
}

function modelCard(name) {
  const card = el("article", { class: "model", "data-model": name, "aria-label": "model " + name });
  const buttons = el("div", { class: "controls" });
  for (const [action, label] of [["load", "Load"], ["unload", "Unload"], ["restart", "Restart"]]) {
    const b = el("button", { type: "button", "data-action": action, text: label });
    b.addEventListener("click", () => control(action, name));
    buttons.append(b);
  }
  const head = el("tr", {});
  for (const h of ["replica", "state", "pid", "port", "uptime", "restarts", "stuck slots", "requests", "tok/s",
    "acceptance"]) {
    head.append(el("th", { scope: "col", text: h }));
  }
  const table = el("table", { class: "replicas" }, el("thead", {}, head), el("tbody", { "data-role": "replicas" }));
  card.append(
    el("header", {}, el("h3", { text: name }), el("span", { class: "badge", "data-role": "state" })),
    el("p", { class: "aliases", "data-role": "aliases" }),
    el("p", { class: "message", "data-role": "message" }),
    el("progress", { class: "load-progress", "data-role": "progress", max: "1", "aria-label": "loading " + name }),
    el("dl", { class: "facts", "data-role": "facts" }),
    el("div", { class: "table-wrap" }, table),
    buttons,
  );
  return card;
}

function updateCard(card, model) {
  const replicas = state.instances.filter((r) => r.model === model.id);
  const st = model.state || "unknown";
  card.dataset.state = st;
  const badge = card.querySelector('[data-role="state"]');
  badge.textContent = st;
  badge.className = "badge state-" + st;
  const aliases = model.aliases || [];
  card.querySelector('[data-role="aliases"]').textContent = aliases.length ? "aliases: " + aliases.join(", ") : "";
  const why = model.reason || replicas.map((r) => r.message).filter(Boolean).join("; ");
  const msg = card.querySelector('[data-role="message"]');
  msg.textContent = st === "ready" ? "" : why || "";
  msg.classList.toggle("error", st === "failed");
  // loading: the lifecycle's estimate from the previous load's duration, when it has one
  const progress = card.querySelector('[data-role="progress"]');
  progress.hidden = !(st === "loading" && typeof model.load_progress === "number");
  if (!progress.hidden) progress.value = model.load_progress;
  renderFacts(card.querySelector('[data-role="facts"]'), model, replicas);
  renderReplicas(card.querySelector('[data-role="replicas"]'), replicas);
  const remote = Array.isArray(model.peers) && !replicas.length; // served only by peer orchestrators
  card.querySelector('[data-action="load"]').disabled = remote || !LOADABLE.includes(st);
  card.querySelector('[data-action="unload"]').disabled = remote || !RUNNING.includes(st);
  card.querySelector('[data-action="restart"]').disabled = remote || (!RUNNING.includes(st) && st !== "failed");
}

function renderFacts(facts, model, replicas) {
  facts.replaceChildren();
  const fact = (k, v) => facts.append(el("dt", { text: k }), el("dd", { text: v }));
  if (Array.isArray(model.peers) && !replicas.length) {
    fact("Served by", "peer " + model.peers.join(", "));
    return;
  }
  const gpus = [...new Set(replicas.flatMap((r) => r.gpus || []))];
  if (model.devices === undefined) fact("Device", gpus.length ? "GPU " + gpus.join(", ") : "CPU");
  const rss = replicas.map((r) => r.rss_bytes).filter((x) => x !== null && x !== undefined);
  if (rss.length) fact("Resident memory", bytes(rss.reduce((a, b) => a + b, 0)));
  for (const [field, label, fmt] of MODEL_FIELDS) {
    if (model[field] !== undefined && model[field] !== null) fact(label, fmt(model[field]));
  }
}

function renderReplicas(body, replicas) {
  body.replaceChildren();
  for (const r of replicas) {
    const acc = r.acceptance === null || r.acceptance === undefined ? r.speculation || "–" : pct(r.acceptance);
    // busy slots that made no progress: requests cancelled and sent again / children restarted
    const np = r.no_progress || { cancels: 0, restarts: 0 };
    const stuck = np.cancels + np.restarts ? `${np.cancels} cancelled, ${np.restarts} restarted` : "0";
    const cells = [r.state, r.pid || "–", r.port || "–", duration(r.uptime_s), r.restarts, stuck, r.requests,
      num(r.decode_tps), acc];
    const row = el("tr", { "data-instance": r.name }, el("th", { scope: "row", text: r.name }));
    for (const c of cells) row.append(el("td", { text: String(c) }));
    body.append(row);
  }
}

const PEER_COLUMNS = [["name", "peer"], ["url", "address"], ["healthy", "healthy"], ["models", "models"],
  ["in_flight", "in flight"], ["requests", "requests"], ["api_key", "key"], ["last_error", "last error"]];

/** Other orchestrators this one sends requests to (``peers:`` in models.yaml), when there are any. */
function renderPeers(info) {
  const peers = (info && info.peers) || [];
  $("peers-section").hidden = !peers.length;
  if (!peers.length) return;
  const head = el("tr", {});
  for (const [, label] of PEER_COLUMNS) head.append(el("th", { scope: "col", text: label }));
  const body = el("tbody", {});
  for (const peer of peers) {
    const row = el("tr", { "data-peer": peer.name });
    for (const [key] of PEER_COLUMNS) {
      const v = peer[key];
      const text = Array.isArray(v) ? v.join(", ") : typeof v === "boolean" ? (v ? "yes" : "no") : String(v ?? "–");
      row.append(el("td", { text }));
    }
    body.append(row);
  }
  $("peers").replaceChildren(el("thead", {}, head), body);
  const routed = (info.routed || []).map((r) => `${r.model} → ${r.target}: ${r.requests}`);
  $("peers-routed").textContent = routed.length ? "requests sent: " + routed.join("; ") : "";
}

async function control(action, model) {
  const msg = $("control-msg");
  msg.className = "control-msg";
  msg.textContent = `${action} ${model}…`;
  try {
    const resp = await postJSON("/models/" + action, { model });
    const body = await resp.json().catch(() => ({}));
    msg.textContent = `${action} ${model}: ${body.status || body.state || "done"}`;
  } catch (err) {
    if (err.status === 401) return;
    msg.classList.add("error");
    msg.textContent = `${action} ${model} failed: ${err.message}`;
  }
  poll(true);
}

// ------------------------------------------------------------------ polling

function stopPolling() {
  clearTimeout(state.timer);
  state.timer = null;
}

async function poll(once) {
  if (!once) stopPolling();
  try {
    const [live, models] = await Promise.all([getJSON("/ui/api/live?since=" + charts.since), getJSON("/v1/models")]);
    if (live.seq < charts.since) { // the server restarted: start the charts over
      charts.reset();
      return poll(once);
    }
    state.interval = Math.max(500, 1000 * live.interval_s);
    state.instances = live.instances;
    // lifecycle rows (state, memory, idle time, time until unload), when the server keeps them
    const rows = Object.fromEntries((live.models || []).map((r) => [r.model, r]));
    state.models = models.data.filter((m) => !m.alias_of).map((m) => ({ ...m, ...(rows[m.id] || {}) }));
    showConsole();
    renderModels();
    syncSelect($("chat-model"), state.models.map((m) => m.id));
    syncSelect($("log-instance"), state.instances.map((r) => r.name));
    charts.add(live.points, state.models.map((m) => m.id));
    renderPeers(live.peers);
    renderDisk(live.disk || []);
    renderDrafts(live.draft_policy);
    renderSessions(live.sessions);
    await logTail.follow();
    connection("live", "· " + new Date().toLocaleTimeString());
  } catch (err) {
    if (err.status === 401) return;
    connection("cannot reach the endpoint: " + err.message, "");
  }
  if (!once && !document.hidden) state.timer = setTimeout(poll, state.interval);
}

/** Files the server cannot write (full, read-only or forbidden folder): it keeps serving without them. */
function renderDisk(faults) {
  const el = $("disk-faults");
  const text = faults.map((f) => `cannot write ${f.what} (${f.path}): ${f.error}`).join("; ");
  el.hidden = !text;
  if (el.textContent !== text) el.textContent = text ? `Disk: ${text}. Serving goes on without them.` : "";
}

/** The connection line; only a change of state is announced (the time is not, every poll). */
function connection(text, time) {
  const conn = $("conn");
  if (conn.textContent !== text) conn.textContent = text;
  conn.classList.toggle("error", text !== "live");
  $("conn-time").textContent = time;
}

document.addEventListener("visibilitychange", () => {
  if (document.hidden) stopPolling();
  else if (!$("main").hidden) poll();
});

matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
  charts.reset(); // redrawn in the new colours from the whole history
  poll(true);
});

function showConsole() {
  if (!$("main").hidden) return;
  $("key-prompt").hidden = true;
  $("main").hidden = false;
  $("forget-key").hidden = !auth.key;
  loadBench();
}

function syncSelect(select, values) {
  const have = [...select.options].map((o) => o.value);
  if (have.join("\n") === values.join("\n")) return;
  const keep = select.value;
  select.replaceChildren(...values.map((v) => el("option", { value: v, text: v })));
  if (values.includes(keep)) select.value = keep;
  select.dispatchEvent(new Event("change"));
}

function start() {
  $("key-prompt").hidden = true;
  poll();
}

initChat();
initBench();
start();
