// The chat box: streams through our own /v1/chat/completions, shows the reasoning apart from the
// answer, and the drafting figures of the answer from llama-server's final `timings`.
import { $, el, num, pct, postJSON } from "./lib.js";

const chat = { messages: [], abort: null };

export function initChat() {
  $("chat-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    send();
  });
  $("chat-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); send(); }
  });
  $("chat-stop").addEventListener("click", () => chat.abort && chat.abort.abort());
  $("chat-clear").addEventListener("click", () => {
    chat.messages = [];
    $("chat-log").replaceChildren();
  });
}

function turnView(text) {
  const reasoning = el("pre", { class: "reasoning-text" });
  const details = el("details", { class: "reasoning", hidden: "" }, el("summary", { text: "Reasoning" }), reasoning);
  const answer = el("div", { class: "answer", "data-role": "answer" });
  const figures = el("dl", { class: "figures", "data-role": "figures" });
  const status = el("p", { class: "turn-status", role: "status" }); // announced; the streamed text is not
  const turn = el("div", { class: "turn" },
    el("p", { class: "user" }, el("strong", { text: "You: " }), text), details, answer, figures, status);
  $("chat-log").append(turn);
  return { turn, details, reasoning, answer, figures, status };
}

async function send() {
  const text = $("chat-input").value.trim();
  const model = $("chat-model").value;
  if (!text || !model || chat.abort) return;
  $("chat-input").value = "";
  const view = turnView(text);
  const messages = chat.messages.concat([{ role: "user", content: text }]);
  const abort = new AbortController();
  chat.abort = abort;
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
    chat.messages = messages.concat([{ role: "assistant", content: answer }]);
  } catch (err) {
    view.status.classList.add("error");
    view.status.textContent = err.name === "AbortError" ? "stopped" : "error: " + err.message;
  } finally {
    chat.abort = null;
    $("chat-send").disabled = false;
    $("chat-stop").disabled = true;
  }
  showFigures(view.figures, timings, first);
}

/** The JSON events of an OpenAI stream (``data:`` lines), until ``[DONE]``. */
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
    // steps = generated - accepted: each step yields one sampled token plus the accepted drafts
    const acc = t.draft_n ? t.draft_n_accepted / t.draft_n : null;
    const steps = t.predicted_n - t.draft_n_accepted;
    add("drafted", String(t.draft_n));
    add("accepted", `${t.draft_n_accepted} (${pct(acc)})`);
    add("tokens per step", steps > 0 ? num(t.predicted_n / steps, 2) : "–");
  } else {
    add("drafting", "none");
  }
}
