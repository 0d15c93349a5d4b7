// The orchestrator console. Plain script, no build step; uPlot (vendor/) draws the charts.
// Every call goes to this origin with the API key as an Authorization header (never a cookie).
// The DOM is built with textContent only: nothing from the server is parsed as HTML.
"use strict";

(() => {
  const KEY_STORE = "orchestrator.console.key";
  const LOG_KEEP = 1000; // lines kept in the log view
  const state = {
    key: sessionStorage.getItem(KEY_STORE) || "",
    since: 0,
    interval: 2000,
    models: [], // canonical /v1/models entries
    instances: [], // /status rows
    charts: null,
    log: { instance: "", offset: null, busy: false },
    chat: { messages: [], abort: null },
    timer: null,
  };
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  }

  // ------------------------------------------------------------------ HTTP

  class HttpError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(path, options = {}) {
    const headers = new Headers(options.headers || {});
    const used = state.key;
    if (used) headers.set("Authorization", "Bearer " + used);
    const resp = await fetch(path, { ...options, headers, credentials: "omit", cache: "no-store" });
    if (resp.status === 401) {
      askForKey(used ? "That key was refused." : "");
      throw new HttpError(401, "API key required");
    }
    if (!resp.ok) {
      let message = resp.status + " " + resp.statusText;
      try {
        const body = await resp.json();
        if (body && body.error && body.error.message) message = body.error.message;
      } catch (_) { /* not JSON */ }
      throw new HttpError(resp.status, message);
    }
    return resp;
  }
  const getJSON = async (path) => (await api(path)).json();
  const postJSON = (path, body, signal) =>
    api(path, { method: "POST", body: JSON.stringify(body), signal, headers: { "Content-Type": "application/json" } });

  // ------------------------------------------------------------------ key prompt

  function askForKey(error) {
    stopPolling();
    state.key = "";
    sessionStorage.removeItem(KEY_STORE);
    $("main").hidden = true;
    $("forget-key").hidden = true;
    $("key-prompt").hidden = false;
    $("key-error").textContent = error || "";
    $("conn").textContent = "locked";
    $("key-input").focus();
  }

  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.key = $("key-input").value.trim();
    $("key-input").value = "";
    sessionStorage.setItem(KEY_STORE, state.key);
    start();
  });
  $("forget-key").addEventListener("click", () => askForKey(""));

  // ------------------------------------------------------------------ formatting

  function duration(s) {
    if (s === null || s === undefined) return "–";
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }
  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + units[i];
  }
  const num = (x, digits = 1) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
  const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(0) + " %");

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
    card.append(
      el("header", {},
        el("h3", { text: name }),
        el("span", { class: "badge", "data-role": "state" })),
      el("p", { class: "aliases", "data-role": "aliases" }),
      el("p", { class: "message", "data-role": "message" }),
      el("dl", { class: "facts", "data-role": "facts" }),
      el("div", { class: "table-wrap" }, replicaTable()),
      buttons,
    );
    return card;
  }

  function replicaTable() {
    const head = el("tr", {});
    for (const h of ["replica", "state", "pid", "port", "uptime", "restarts", "requests", "tok/s", "acceptance"]) {
      head.append(el("th", { scope: "col", text: h }));
    }
    return el("table", { class: "replicas" }, el("thead", {}, head), el("tbody", { "data-role": "replicas" }));
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
    const why = model.reason || model.message || replicas.map((r) => r.message).filter(Boolean).join("; ");
    const msg = card.querySelector('[data-role="message"]');
    msg.textContent = st === "ready" ? "" : why || "";
    msg.classList.toggle("error", st === "failed");

    const facts = card.querySelector('[data-role="facts"]');
    facts.replaceChildren();
    const gpus = [...new Set(replicas.flatMap((r) => r.gpus || []))];
    const fact = (k, v) => facts.append(el("dt", { text: k }), el("dd", { text: v }));
    if (model.devices === undefined) fact("Device", gpus.length ? "GPU " + gpus.join(", ") : "CPU");
    const rss = replicas.map((r) => r.rss_bytes).filter((x) => x !== null && x !== undefined);
    if (rss.length) fact("Resident memory", bytes(rss.reduce((a, b) => a + b, 0)));
    for (const [field, label, fmt] of MODEL_FIELDS) {
      if (model[field] !== undefined && model[field] !== null) fact(label, fmt(model[field]));
    }

    const body = card.querySelector('[data-role="replicas"]');
    body.replaceChildren();
    for (const r of replicas) {
      const acc = r.acceptance === null || r.acceptance === undefined ? r.speculation || "–" : pct(r.acceptance);
      const cells = [r.name, r.state, r.pid || "–", r.port || "–", duration(r.uptime_s), r.restarts, r.requests,
        num(r.decode_tps), acc];
      const row = el("tr", { "data-instance": r.name });
      cells.forEach((c, i) => row.append(el(i ? "td" : "th", i ? { text: String(c) } : { scope: "row", text: c })));
      body.append(row);
    }
    const loaded = ["ready", "degraded", "loading", "restarting"].includes(st);
    card.querySelector('[data-action="load"]').disabled = !["unloaded", "stopped", "failed"].includes(st);
    card.querySelector('[data-action="unload"]').disabled = !loaded;
    card.querySelector('[data-action="restart"]').disabled = !loaded && st !== "failed";
  }

  async function control(action, model) {
    const msg = $("control-msg");
    msg.className = "control-msg";
    msg.textContent = `${action} ${model}…`;
    try {
      const resp = await postJSON("/models/" + action, { model });
      const body = await resp.json().catch(() => ({}));
      msg.textContent = `${action} ${model}: ${body.status || "done"}`;
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
      const [live, models] = await Promise.all([getJSON("/ui/api/live?since=" + state.since), getJSON("/v1/models")]);
      state.interval = Math.max(500, 1000 * live.interval_s);
      state.instances = live.instances;
      // lifecycle rows (state, memory, idle time, time until unload), when the server keeps them
      const rows = Object.fromEntries((live.models || []).map((r) => [r.model, r]));
      state.models = models.data.filter((m) => !m.alias_of).map((m) => ({ ...m, ...(rows[m.id] || {}) }));
      if (live.seq < state.since) { // the server restarted: start the charts over
        dropCharts();
        return poll(once);
      }
      showConsole();
      renderModels();
      syncSelect($("chat-model"), state.models.map((m) => m.id));
      syncSelect($("log-instance"), state.instances.map((r) => r.name));
      addPoints(live.points);
      await followLog();
      $("conn").textContent = "live · " + new Date().toLocaleTimeString();
      $("conn").classList.remove("error");
    } catch (err) {
      if (err.status === 401) return;
      $("conn").textContent = "cannot reach the endpoint: " + err.message;
      $("conn").classList.add("error");
    }
    if (!once && !document.hidden) state.timer = setTimeout(poll, state.interval);
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) stopPolling();
    else if (!$("main").hidden) poll();
  });

  function showConsole() {
    if (!$("main").hidden) return;
    $("key-prompt").hidden = true;
    $("main").hidden = false;
    $("forget-key").hidden = !state.key;
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

  // ------------------------------------------------------------------ charts

  const CHARTS = [
    { key: "decode_tps", title: "Decode speed", unit: "tok/s", fmt: (x) => num(x, 1) },
    { key: "acceptance", title: "Draft acceptance", unit: "accepted / drafted", fmt: pct, range: [0, 1] },
    { key: "tokens_per_step", title: "Tokens per draft step", unit: "tokens", fmt: (x) => num(x, 2) },
    { key: "rps", title: "Requests", unit: "per second", fmt: (x) => num(x, 2) },
    { key: "ttft_s", title: "Time to first token", unit: "ms", fmt: (x) => num(x * 1000, 0), scale: 1000 },
    { key: "queued", title: "Queue depth", unit: "waiting for a slot (in flight)", fmt: (x) => num(x, 0),
      extra: "in_flight" },
  ];
  const PALETTE = ["#2f7fd8", "#d8612f", "#2fa86a", "#a23fc4", "#c49a1f", "#d83f7f"];

  function chartColors() {
    const css = getComputedStyle(document.documentElement);
    return { fg: css.getPropertyValue("--muted").trim(), grid: css.getPropertyValue("--grid").trim() };
  }

  function buildCharts() {
    const box = $("charts");
    box.replaceChildren();
    const models = state.models.map((m) => m.id);
    const colors = chartColors();
    const xs = [];
    const charts = { xs, models, list: [] };
    for (const spec of CHARTS) {
      const latest = el("p", { class: "latest", "data-chart": spec.key, text: "no data yet" });
      const plot = el("div", { class: "plot", role: "img", "aria-label": `${spec.title} (${spec.unit}) per model` });
      const fig = el("figure", { class: "chart", "data-chart": spec.key, "data-points": "0" },
        el("figcaption", {}, el("strong", { text: spec.title }), " ", el("span", { class: "unit", text: spec.unit })),
        plot, latest);
      box.append(fig);
      const axis = { stroke: colors.fg, grid: { stroke: colors.grid, width: 1 }, ticks: { stroke: colors.grid } };
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
        axes: [axis, { ...axis, size: 48 }],
        scales: { x: { time: true }, y: spec.range ? { range: spec.range } : { auto: true } },
        legend: { show: models.length > 1 }, cursor: { drag: { x: false, y: false } },
      };
      const chart = new uPlot(opts, [xs, ...ys], plot);
      charts.list.push({ spec, chart, ys, fig, latest });
    }
    const resize = new ResizeObserver(() => {
      for (const c of charts.list) c.chart.setSize({ width: Math.max(240, c.fig.clientWidth - 16), height: 160 });
    });
    for (const c of charts.list) resize.observe(c.fig);
    charts.resize = resize;
    state.charts = charts;
  }

  function addPoints(points) {
    const models = state.models.map((m) => m.id);
    if (!state.charts || state.charts.models.join("\n") !== models.join("\n")) {
      const had = state.since;
      dropCharts();
      buildCharts();
      if (had) return; // the model list changed: the next poll fetches the whole history
    }
    const c = state.charts;
    for (const p of points) {
      c.xs.push(p.t);
      for (const chart of c.list) {
        let i = 0;
        for (const m of c.models) {
          const v = (p.models[m] || {})[chart.spec.key];
          chart.ys[i++].push(v === null || v === undefined ? null : v * (chart.spec.scale || 1));
          if (chart.spec.extra) chart.ys[i++].push((p.models[m] || {})[chart.spec.extra] ?? null);
        }
      }
      state.since = p.seq;
    }
    const keep = 300;
    if (c.xs.length > keep) {
      const drop = c.xs.length - keep;
      c.xs.splice(0, drop);
      for (const chart of c.list) for (const y of chart.ys) y.splice(0, drop);
    }
    if (!points.length) return;
    for (const chart of c.list) {
      chart.chart.setData([c.xs, ...chart.ys]);
      chart.fig.dataset.points = String(c.xs.length);
      chart.latest.textContent = latestText(chart, c.models);
    }
  }

  function latestText(chart, models) {
    // the charts' text alternative: each model's most recent value
    const parts = [];
    let i = 0;
    for (const m of models) {
      const ys = chart.ys[i];
      let last = null;
      for (let j = ys.length - 1; j >= 0; j--) if (ys[j] !== null) { last = ys[j]; break; }
      const shown = last === null ? "–" : chart.spec.fmt(last / (chart.spec.scale || 1));
      parts.push(`${m}: ${shown}`);
      i += chart.spec.extra ? 2 : 1;
    }
    return "latest " + parts.join(", ");
  }

  function dropCharts() {
    if (state.charts) state.charts.resize.disconnect();
    state.charts = null;
    state.since = 0;
  }

  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
    if (state.charts) { dropCharts(); poll(true); }
  });

  // ------------------------------------------------------------------ log tail

  $("log-instance").addEventListener("change", () => {
    state.log = { instance: $("log-instance").value, offset: null, busy: false };
    $("log").textContent = "";
    followLog();
  });
  $("log-follow").addEventListener("change", () => followLog());

  async function followLog() {
    const log = state.log;
    if (!log.instance || log.busy || (!$("log-follow").checked && log.offset !== null)) return;
    log.busy = true;
    try {
      const q = log.offset === null ? "" : "?offset=" + log.offset;
      const body = await getJSON(`/ui/api/logs/${encodeURIComponent(log.instance)}${q}`);
      if (state.log !== log) return; // switched instance meanwhile
      log.offset = body.offset;
      if (body.lines.length) appendLog(body.lines);
    } finally {
      log.busy = false;
    }
  }

  function appendLog(lines) {
    const pre = $("log");
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    const all = (pre.textContent ? pre.textContent.split("\n") : []).concat(lines);
    pre.textContent = all.slice(-LOG_KEEP).join("\n");
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }

  // ------------------------------------------------------------------ chat

  $("chat-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sendChat();
  });
  $("chat-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); sendChat(); }
  });
  $("chat-stop").addEventListener("click", () => state.chat.abort && state.chat.abort.abort());
  $("chat-clear").addEventListener("click", () => {
    state.chat.messages = [];
    $("chat-log").replaceChildren();
  });

  function chatTurn(text) {
    const reasoning = el("pre", { class: "reasoning-text" });
    const details = el("details", { class: "reasoning", hidden: "" }, el("summary", { text: "Reasoning" }), reasoning);
    const answer = el("div", { class: "answer", "data-role": "answer" });
    const figures = el("dl", { class: "figures", "data-role": "figures" });
    const status = el("p", { class: "turn-status" });
    const turn = el("div", { class: "turn" },
      el("p", { class: "user" }, el("strong", { text: "You: " }), text), details, answer, figures, status);
    $("chat-log").append(turn);
    return { turn, details, reasoning, answer, figures, status };
  }

  async function sendChat() {
    const text = $("chat-input").value.trim();
    const model = $("chat-model").value;
    if (!text || !model || state.chat.abort) return;
    $("chat-input").value = "";
    const view = chatTurn(text);
    const messages = state.chat.messages.concat([{ role: "user", content: text }]);
    const abort = new AbortController();
    state.chat.abort = abort;
    $("chat-send").disabled = true;
    $("chat-stop").disabled = false;
    view.status.textContent = "waiting for the first token…";
    const t0 = performance.now();
    let first = null;
    let answer = "";
    let timings = null;
    try {
      const body = { model, messages, stream: true, max_tokens: Number($("chat-max").value) || 128 };
      const thinking = $("chat-thinking").value;
      if (thinking) body.chat_template_kwargs = { enable_thinking: thinking === "on" };
      const resp = await postJSON("/v1/chat/completions", body, abort.signal);
      for await (const event of sseEvents(resp.body)) {
        if (event.error) throw new Error(event.error.message || "error");
        if (event.timings) timings = event.timings;
        const delta = (event.choices && event.choices[0] && event.choices[0].delta) || {};
        if (delta.reasoning_content) {
          view.details.hidden = false;
          view.details.open = true;
          view.reasoning.textContent += delta.reasoning_content;
        }
        if (delta.content) {
          answer += delta.content;
          view.answer.textContent = answer;
        }
        if (first === null && (delta.content || delta.reasoning_content)) {
          first = performance.now() - t0;
          view.status.textContent = "streaming…";
        }
      }
      view.status.textContent = answer ? "" : "no answer text: the model only reasoned (see above)";
      view.details.open = !answer;
      state.chat.messages = messages.concat([{ role: "assistant", content: answer }]);
    } catch (err) {
      view.status.classList.add("error");
      view.status.textContent = err.name === "AbortError" ? "stopped" : "error: " + err.message;
    } finally {
      state.chat.abort = null;
      $("chat-send").disabled = false;
      $("chat-stop").disabled = true;
    }
    showFigures(view.figures, timings, first);
  }

  async function* sseEvents(stream) {
    const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let cut;
      while ((cut = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, cut).replace(/\r$/, "");
        buf = buf.slice(cut + 1);
        if (!line.startsWith("data:")) continue; // comments (": waiting") and blank lines
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }

  function showFigures(dl, t, ttftMs) {
    const add = (k, v) => dl.append(el("dt", { text: k }), el("dd", { text: v }));
    if (ttftMs !== null) add("first token", num(ttftMs, 0) + " ms");
    if (!t) return;
    add("tokens", String(t.predicted_n ?? "–"));
    add("decode", num(t.predicted_per_second) + " tok/s");
    if (t.draft_n !== undefined) {
      const acc = t.draft_n ? t.draft_n_accepted / t.draft_n : null;
      const steps = t.predicted_n - t.draft_n_accepted;
      add("drafted", String(t.draft_n));
      add("accepted", `${t.draft_n_accepted} (${pct(acc)})`);
      add("tokens per step", steps > 0 ? num(t.predicted_n / steps, 2) : "–");
    } else {
      add("drafting", "none");
    }
  }

  // ------------------------------------------------------------------ bench

  $("bench-refresh").addEventListener("click", () => loadBench());

  async function loadBench() {
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
    const cols = [["k", "K"], ["domain", "prompts"], ["requests", "requests"], ["tps_median", "decode tok/s"],
      ["ttft_median", "TTFT s"], ["acceptance", "acceptance"], ["tokens_per_step", "tokens/step"],
      ["speedup", "speedup"]];
    for (const [, label] of cols) head.append(el("th", { scope: "col", text: label }));
    const body = el("tbody", {});
    for (const row of b.rows) {
      const tr = el("tr", {});
      for (const [k] of cols) {
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
      const img = el("img", { class: "bench-plot", alt: `decode tok/s and acceptance by K for ${b.model}` });
      api("/ui/api/bench/plot").then((r) => r.blob()).then((blob) => { img.src = URL.createObjectURL(blob); })
        .catch(() => img.remove());
      parts.push(img);
    }
    box.replaceChildren(...parts);
  }

  // ------------------------------------------------------------------ start

  function start() {
    $("key-prompt").hidden = true;
    poll();
  }
  start();
})();
