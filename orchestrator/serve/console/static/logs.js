// The log tail: follows one instance's log through /ui/api/logs/<instance>?offset=<bytes>.
import { $, getJSON } from "./lib.js";

const KEEP = 1000; // lines kept in the view

export class LogTail {
  constructor() {
    this.log = { instance: "", offset: null, busy: false, error: null };
    $("log-instance").addEventListener("change", () => {
      this.log = { instance: $("log-instance").value, offset: null, busy: false, error: null };
      $("log").textContent = "";
      this.follow().catch(() => {});
    });
    $("log-follow").addEventListener("change", () => this.follow().catch(() => {}));
  }

  /** Fetch the lines written since the last call (the last 1000 on the first). */
  async follow() {
    const log = this.log;
    if (!log.instance || log.busy || (!$("log-follow").checked && log.offset !== null)) return;
    log.busy = true;
    try {
      const q = log.offset === null ? "" : "?offset=" + log.offset;
      const body = await getJSON(`/ui/api/logs/${encodeURIComponent(log.instance)}${q}`);
      if (this.log !== log) return; // switched instance meanwhile
      if (body.memory) { // the log file cannot be written (disk): the server's in-memory tail, whole
        $("log").textContent = "";
        append(["[console: the log file cannot be written; the last lines kept in memory]", ...body.lines]);
        return; // offset stays null: the next poll asks for the tail again
      }
      log.offset = body.offset;
      if (body.lines.length) append(body.lines);
    } catch (err) {
      if (err.status === 401) throw err;
      if (log.error !== err.message) append([`[console: cannot read this log: ${err.message}]`]);
      log.error = err.message; // said once, not on every poll
    } finally {
      log.busy = false;
    }
  }
}

function append(lines) {
  const pre = $("log");
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
  const all = (pre.textContent ? pre.textContent.split("\n") : []).concat(lines);
  pre.textContent = all.slice(-KEEP).join("\n");
  if (atEnd) pre.scrollTop = pre.scrollHeight;
}
