#!/usr/bin/env python3
"""Prompt-cache persistence on real sessions, through ``orchestrator up`` on the tiny hybrid model.

A growing agent conversation (a long system prompt and tool list, then turns of a long user or
tool-result message, each answer sent back as history the way a client re-renders it) is replayed
turn by turn, greedy and streamed. Each replay runs on its own ``orchestrator up`` (its own state
and KV folder), one after the other in one run:

- ``live``: uninterrupted;
- ``unload``: ``POST /models/unload`` then ``POST /models/load`` before turn K;
- ``down+up``: ``orchestrator down``, then ``orchestrator up`` again (same KV folder) before turn K;
- ``no-persist``: the unload of ``unload`` with ``kv_persist: false`` (what a swap costs without it).

Per turn: prompt tokens, TTFT (first streamed token), tokens processed (``timings.prompt_n``) and
taken from the cache (``cache_n``), and the drafting figures. Then whether each turn's greedy
text after the swap equals live's, the draft acceptance of the turns after the swap against
live's, and the same request repeated after an unload + load.

``--multi``: several conversations on one slot. A main agent and a subagent (another system
prompt) alternate on one slot (``parallel: 1``), with llama-server's host-RAM prompt cache on (its
default, ``--cache-ram``) and off (``--cache-ram 0``), and with an unload between the two
conversations' turns (our persistence): the prompt tokens each request processed.

    python scripts/measure_kv_persist.py [--turns 6] [--swap-before 4] [--multi]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from orchestrator.models.tiny import demo_model

POLL = 0.1
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name}: " + " ".join(f"rule{i} of {name} says so" for i in range(40)),
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
    for name in ("read_file", "edit_file", "run_shell", "search_code")
]


def text(tag: str, units: int) -> str:
    """About 6.7 tokens per unit with the tiny model's vocabulary; the first token differs per tag."""
    return " ".join(f"{tag}{i} alpha beta gamma" for i in range(units))


class Up:
    """One ``orchestrator up`` on ``config`` with its own state folder and the KV folder ``kv``."""

    def __init__(self, config: Path, state: Path, kv: Path) -> None:
        self.env = {**os.environ, "ORCHESTRATOR_STATE": str(state), "ORCHESTRATOR_KV": str(kv)}
        self.state, self.config = state, config
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> Up:
        log = (self.state / "up.log").open("ab")
        argv = [sys.executable, "-m", "orchestrator.cli.app", "up", "--config", str(self.config)]
        self.proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"orchestrator up exited with {self.proc.returncode}; see {self.state / 'up.log'}")
            try:
                url = json.loads((self.state / "run.json").read_text())["endpoint"]
                models = httpx.get(f"{url}/status", timeout=5, trust_env=False).json()["models"]
                if all(m["state"] == "ready" for m in models):
                    self.url = url
                    return self
            except (OSError, ValueError, KeyError, httpx.HTTPError):
                pass
            time.sleep(POLL)
        raise SystemExit("orchestrator up did not serve within 300 s")

    def down(self) -> None:
        argv = [sys.executable, "-m", "orchestrator.cli.app", "down", "--timeout", "120"]
        subprocess.run(argv, env=self.env, check=True, capture_output=True)
        if self.proc is not None:
            self.proc.wait(timeout=120)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(self.url + path, json=body, timeout=600, trust_env=False)
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data

    def kv(self) -> dict[str, Any]:
        rows = httpx.get(f"{self.url}/status", timeout=30, trust_env=False).json()["models"]
        return dict(rows[0].get("kv") or {})

    def chat(self, messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        """One streamed greedy chat turn: ``ttft``, ``content``, ``timings``, ``prompt_tokens``."""
        body = {"model": "m", "messages": messages, "tools": TOOLS, "max_tokens": max_tokens, "temperature": 0}
        body |= {"stream": True, "stream_options": {"include_usage": True}}
        first, content, timings, usage = None, [], {}, {}
        started = time.perf_counter()
        with httpx.stream("POST", f"{self.url}/v1/chat/completions", json=body, timeout=600, trust_env=False) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                delta = (event.get("choices") or [{}])[0].get("delta") or {}
                piece = delta.get("content") or delta.get("reasoning_content")
                if piece and first is None:
                    first = time.perf_counter() - started
                content.append(delta.get("content") or "")
                timings = event.get("timings") or timings
                usage = event.get("usage") or usage
        return {
            "ttft": first if first is not None else time.perf_counter() - started,
            "content": "".join(content),
            "timings": timings,
            "prompt_tokens": usage.get("prompt_tokens", 0),
        }


def write_config(folder: Path, ctx: int, *, persist: bool = True, extra: tuple[str, ...] = ()) -> Path:
    model = {
        "name": "m", "path": str(demo_model()), "ctx_size": ctx, "threads": 2, "load": "on_start",
        "allow_ctx_beyond_trained": True, "kv_persist": persist, "extra_args": list(extra),
    }  # fmt: skip
    server = {"host": "127.0.0.1", "port": 0, "memory_reserve": 0}
    path = folder / "models.yaml"
    path.write_text(json.dumps({"server": server, "models": [model]}))  # JSON is YAML
    return path


def session(up: Up, args: argparse.Namespace, swap: str | None, tag: str = "agent") -> list[dict[str, Any]]:
    """Replay the session on ``up``; before turn ``args.swap_before``: ``unload``, ``down+up`` or nothing."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": text(tag, args.system_units)}]
    turns = []
    for turn in range(1, args.turns + 1):
        if turn == args.swap_before and swap == "unload":
            up.post("/models/unload", {"model": "m"})
            up.post("/models/load", {"model": "m"})
        elif turn == args.swap_before and swap == "down+up":
            up.down()
            up.start()
        messages.append({"role": "user", "content": text(f"{tag}t{turn}x", args.user_units)})
        out = up.chat(messages, args.answer_tokens)
        messages.append({"role": "assistant", "content": out["content"]})
        turns.append(out)
    return turns


def run_mode(work: Path, args: argparse.Namespace, mode: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    folder = work / mode.replace("+", "-")
    (folder / "state").mkdir(parents=True)
    config = write_config(folder, args.ctx, persist=mode != "no-persist")
    up = Up(config, folder / "state", folder / "kv").start()
    try:
        swap = {"live": None, "unload": "unload", "down+up": "down+up", "no-persist": "unload"}[mode]
        turns = session(up, args, swap)
        extra: dict[str, Any] = {"kv": up.kv()}
        if mode == "unload":  # the same request again after unload + load
            body = {"model": "m", "prompt": text("doc", 400), "max_tokens": 8, "temperature": 0}
            first = up.post("/v1/completions", body)
            up.post("/models/unload", {"model": "m"})
            up.post("/models/load", {"model": "m"})
            again = up.post("/v1/completions", body)
            extra["repeat"] = (
                first["timings"],
                again["timings"],
                first["choices"][0]["text"] == again["choices"][0]["text"],
            )
        return turns, extra
    finally:
        up.down()


def acceptance(turns: list[dict[str, Any]]) -> float | None:
    drafted = sum(t["timings"].get("draft_n", 0) for t in turns)
    accepted = sum(t["timings"].get("draft_n_accepted", 0) for t in turns)
    return accepted / drafted if drafted else None


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    modes = list(results)
    print("turn  prompt  " + "  ".join(f"{m + ' TTFT s':>16} {'processed':>9} {'cached':>6}" for m in modes))
    for i in range(args.turns):
        cells = []
        for m in modes:
            t = results[m][i]
            cells.append(
                f"{t['ttft']:16.3f} {t['timings'].get('prompt_n', -1):9d} {t['timings'].get('cache_n', -1):6d}"
            )
        print(f"{i + 1:4d}  {results['live'][i]['prompt_tokens']:6d}  " + "  ".join(cells))
    k = args.swap_before - 1
    for m in modes[1:]:
        same = [results[m][i]["content"] == results["live"][i]["content"] for i in range(args.turns)]
        live_acc, acc = acceptance(results["live"][k:]), acceptance(results[m][k:])
        print(f"{m}: greedy text equal to live on every turn: {all(same)} {same}; draft acceptance from turn "
              f"{args.swap_before}: {acc} (live {live_acc})")  # fmt: skip
    new = results["live"][k]["prompt_tokens"] - results["live"][k - 1]["prompt_tokens"]
    done = {m: results[m][k]["timings"].get("prompt_n") for m in modes}
    print(f"turn {args.swap_before}: {new} prompt tokens more than turn {k}; processed: {done}")


def multi(work: Path, args: argparse.Namespace) -> None:
    """Main agent and subagent alternating on one slot: cache-ram on, off, and across unloads."""
    setups = {"cache-ram default": (), "cache-ram 0": ("--cache-ram", "0"), "unload between (ours)": ()}
    for n, (name, extra) in enumerate(setups.items()):
        folder = work / f"multi-{n}"
        (folder / "state").mkdir(parents=True)
        up = Up(write_config(folder, args.ctx, extra=extra), folder / "state", folder / "kv").start()
        try:
            convs: dict[str, list[dict[str, Any]]] = {
                c: [{"role": "system", "content": text(c, args.system_units // (1 if c == "main" else 2))}]
                for c in ("main", "sub")
            }
            processed = []
            for turn in range(1, 4):
                for c in ("main", "sub"):
                    if name.startswith("unload"):
                        up.post("/models/unload", {"model": "m"})
                        up.post("/models/load", {"model": "m"})
                    convs[c].append({"role": "user", "content": text(f"{c}t{turn}x", args.user_units // 2)})
                    out = up.chat(convs[c], args.answer_tokens)
                    convs[c].append({"role": "assistant", "content": out["content"]})
                    processed.append((c, out["prompt_tokens"], out["timings"].get("prompt_n"), round(out["ttft"], 3)))
            total = sum(p[2] or 0 for p in processed)
            print(f"{name}: processed {total} prompt tokens in all; per request (conv, prompt, processed, TTFT s):")
            print("   ", processed)
        finally:
            up.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--swap-before", type=int, default=4)
    ap.add_argument("--system-units", type=int, default=1000, help="system prompt size (about 6.7 tokens each)")
    ap.add_argument("--user-units", type=int, default=230, help="each user message's size")
    ap.add_argument("--answer-tokens", type=int, default=48)
    ap.add_argument("--ctx", type=int, default=24576)
    ap.add_argument("--multi", action="store_true", help="also: main agent and subagent on one slot")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvmeasure-") as tmp:
        work = Path(tmp)
        results: dict[str, list[dict[str, Any]]] = {}
        for mode in ("live", "unload", "down+up", "no-persist"):
            results[mode], extra = run_mode(work, args, mode)
            print(f"{mode}: kv {json.dumps({k: extra['kv'].get(k) for k in ('saved', 'restored', 'checkpoints')})}")
            if "repeat" in extra:
                first, again, same = extra["repeat"]
                total = again.get("prompt_n", 0) + again.get("cache_n", 0)
                print(f"same request after unload + load: processed {again.get('prompt_n')} of {total} "
                      f"(before the unload {first.get('prompt_n')}); same text: {same}")  # fmt: skip
        report(results, args)
        if args.multi:
            multi(work, args)


if __name__ == "__main__":
    main()
