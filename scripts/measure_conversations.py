#!/usr/bin/env python3
"""Several conversations on one model, through ``orchestrator up`` on the tiny demo model.

Two conversations share a long system prompt (about 700 tokens: two agent sessions on one
system prompt) and alternate three turns each (a, b, a, b, a, b); then a third conversation with
the same session key as the first (a side request: a title) runs between two of the first's
turns. Per request: the prompt tokens processed (``timings.prompt_n``), taken from the cache
(``cache_n``) and new since that conversation's last turn (its prompt and answer then). The
criterion: every turn after each one's first processes at most its new tokens + 64.

Each setup runs on its own ``orchestrator up`` (its own state and KV folder), one after the other;
``ORCHESTRATOR_BIN_DIR`` picks another llama-server build (one without native patch 0008: before):

    python scripts/measure_conversations.py [--parallel 1 2] [--extra "--cache-ram 0"]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_kv_persist import Up  # a sibling script

from orchestrator.models.tiny import demo_model

SYSTEM = "You are a careful coding agent working in a large repository. " * 56  # about 700 tokens
DETAIL = " The tokenizer drops the last line of every file it reads." * 4  # a first message's own tail
SLACK = 64


def write_config(folder: Path, parallel: int, extra: list[str]) -> Path:
    model = {
        "name": "demo", "path": str(demo_model()), "ctx_size": 8192 * parallel, "threads": 2,
        "parallel": parallel, "load": "on_start", "allow_ctx_beyond_trained": True, "extra_args": extra,
    }  # fmt: skip
    server = {"host": "127.0.0.1", "port": 0, "memory_reserve": 0}
    path = folder / "models.yaml"
    path.write_text(json.dumps({"server": server, "models": [model]}))  # JSON is YAML
    return path


class Conversation:
    """One conversation: its messages and the size of its last turn (prompt + answer)."""

    def __init__(self, url: str, first: str, key: str | None = None) -> None:
        self.url, self.key = url, key
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": first + DETAIL},
        ]
        self.before: int | None = None

    def turn(self, next_user: str) -> tuple[int, int, int]:
        """One request: ``(processed, cached, new)`` prompt tokens."""
        body: dict[str, Any] = {"model": "demo", "messages": self.messages, "max_tokens": 16, "temperature": 0}
        if self.key:
            body["prompt_cache_key"] = self.key
        r = httpx.post(self.url + "/v1/chat/completions", json=body, timeout=600, trust_env=False)
        r.raise_for_status()
        t = r.json()["timings"]
        total = t["prompt_n"] + t.get("cache_n", 0)
        new = total if self.before is None else max(0, total - self.before)
        self.before = total + t["predicted_n"]
        message = r.json()["choices"][0]["message"]
        answer = {"role": "assistant", "content": message.get("content") or ""}
        answer["reasoning_content"] = message.get("reasoning_content") or ""
        self.messages += [answer, {"role": "user", "content": next_user}]
        return t["prompt_n"], t.get("cache_n", 0), new


def alternate(url: str) -> list[tuple[str, int, int, int, int]]:
    a, b = Conversation(url, "Fix the parser bug"), Conversation(url, "Write the release notes")
    rows = []
    for k in range(3):
        rows.append(("a", k, *a.turn(f"a: and then step {k}")))
        rows.append(("b", k, *b.turn(f"b: and then part {k}")))
    return rows


def side_request(url: str) -> list[tuple[str, int, int, int, int]]:
    main = Conversation(url, "Refactor the scheduler", key="session-1")
    rows = [("main", 0, *main.turn("continue")), ("main", 1, *main.turn("continue again"))]
    title = Conversation(url, "Write a 5-word title for this conversation", key="session-1")
    rows.append(("title", 0, *title.turn("ok")))
    rows.append(("main", 2, *main.turn("and finish")))
    return rows


def show(name: str, rows: list[tuple[str, int, int, int, int]]) -> bool:
    print(f"  {name}: (conversation, turn, processed, cached, new)")
    ok = True
    for who, k, processed, cached, new in rows:
        bad = k > 0 and processed > new + SLACK
        ok = ok and not bad
        mark = "  <-- over" if bad else ""
        print(f"    {who:5s} {k}  processed {processed:5d}  cached {cached:5d}  new {new:5d}{mark}")
    later = [r for r in rows if r[1] > 0]
    print(f"    turns after the first: processed {sum(r[2] for r in later)} of "
          f"{sum(r[2] + r[3] for r in later)} prompt tokens, {sum(r[4] for r in later)} new; "
          f"criterion (new + {SLACK}) {'met' if ok else 'NOT met'}")  # fmt: skip
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallel", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--extra", default="", help="extra llama-server arguments (one string)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="convmeasure-") as tmp:
        for parallel in args.parallel:
            folder = Path(tmp) / f"p{parallel}"
            (folder / "state").mkdir(parents=True)
            config = write_config(folder, parallel, shlex.split(args.extra))
            up = Up(config, folder / "state", folder / "kv").start()
            try:
                print(f"parallel: {parallel}  extra_args: {args.extra or '-'}")
                show("two conversations, one system prompt, alternating", alternate(up.url))
                show("a side request (same session key) between two turns", side_request(up.url))
                kv = httpx.get(up.url + "/status", timeout=30, trust_env=False).json()["models"][0].get("kv")
                print(f"  kv: {json.dumps(kv)}")
            finally:
                up.down()


if __name__ == "__main__":
    main()
