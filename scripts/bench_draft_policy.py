#!/usr/bin/env python3
"""The per-request draft-length policy against every static K, on a mixed workload, in one run.

The model is the test bed (``orchestrator/models/content_kinds.py``): the shaped echo model at
scale ``bed`` with the ``kinds`` profile, whose MTP head is always right on Latin text, always
wrong on CJK text, and right less and less along the answer on Cyrillic text. One llama-server
serves it with ``--spec-draft-n-max`` = the largest K; every request sets its own
``speculative.n_max`` (our patch 0002), so all arms share one process, one page cache and the
same moment of machine load.

Each round sends, for every class and every arm in a shuffled order, one completion of the
class's prompt for that round: the static arms at their K, the adaptive arm at the K the
policy (``orchestrator/serve/drafting/policy.py``, the proxy's own code) chooses for the request's
class (``orchestrator/serve/drafting/classes.py``). The policy learns only from its own answers
(``--learn-from all`` lets it see the static arms' answers too, as the proxy sees every
client's). Round 0 is a warm-up and not counted. Printed: decode tok/s (tokens over decode
time, summed over the counted rounds) per class and overall for every arm, the adaptive arm
against the best static K overall, against the best K of each class and against K = 0, and
the K it chose per class.

``--replay RUN.json`` (a run written with ``--json``) evaluates the current policy offline on
that run's recorded answers: at each adaptive turn it gets the answer the static arm at the K it
chose got for the same prompt and round, so policy changes are compared without the machine's
noise (a live run still decides).

With ``--spec-type draft-mtp,ngram-mod`` the server drafts with both (the pin asks the n-gram
drafter first), so every arm is that combined drafter at its K; ``--classes`` may add copy
classes (``cjk-copy``: a passage, then its first tokens again, so the answer repeats context,
which the n-gram drafter gets right where the head does not).

    python scripts/bench_draft_policy.py [--rounds 24] [--n-predict 32] [--ks 0,1,2,3] [--threads 1]
        [--spec-type draft-mtp,ngram-mod --classes latin,cjk,cjk-copy]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from orchestrator.host.process import die_with_parent
from orchestrator.models import content_kinds as ck
from orchestrator.models import tiny
from orchestrator.models.shaped import write_shaped_model
from orchestrator.native.build import locate
from orchestrator.serve.drafting import classes as dc
from orchestrator.serve.drafting import policy as dp

CLASSES = ("latin", "cjk", "cyrillic")
COPY = "-copy"  # a class suffix: the prompt holds a passage of the kind, then its start again


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=24, help="rounds after the warm-up (the policy explores every 16th)")
    p.add_argument("--n-predict", type=int, default=32)
    p.add_argument("--ks", default="0,1,2,3", help="static arms; the largest is the launch n_max")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--prompt-tokens", type=int, default=40)
    p.add_argument("--learn-from", choices=("own", "all"), default="own")
    p.add_argument("--model", type=Path, default=Path(tempfile.gettempdir()) / "orchestrator-bed-kinds-f16.gguf")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--classes", default=",".join(CLASSES), help=f"of {', '.join(CLASSES)}, each also with {COPY}")
    p.add_argument("--spec-type", default="draft-mtp", help="the server's drafters, e.g. draft-mtp,ngram-mod")
    p.add_argument("--ngram", default="4,1,16", help="ngram-mod n_match,n_min,n_max (with ngram-mod)")
    p.add_argument("--json", type=Path, help="also write every answer's figures here")
    p.add_argument("--replay", type=Path, help="no server: the current policy on a --json run's recorded answers")
    return p.parse_args()


Prompt = tuple[str, list[int] | None]  # the text the policy classifies; token ids sent instead, if any


def _prompts(classes: list[str], n_rounds: int, n_tokens: int, seed: int) -> dict[str, list[Prompt]]:
    """Per class, one prompt per round: ``n_tokens`` random tokens of the class's kind, as text;
    a copy class: a passage the model's echo writes from a random start, a break, and the
    passage's first 6 tokens again (so the answer repeats the passage), as token ids."""
    vocab = tiny._load_vocab()
    kinds = ck.clean_kinds(vocab.kv, vocab.clean)
    succ = ck.kind_map(kinds, 0.1, 0).successor
    tokens = next(v for k, v, *_ in vocab.kv if k == "tokenizer.ggml.tokens")
    dec = tiny._bytes_decoder()

    def text(ids: list[int]) -> str:
        return "".join(bytes(dec[c] for c in tokens[t]).decode("utf-8") for t in ids)

    rng = np.random.default_rng(seed)
    out: dict[str, list[Prompt]] = {}
    for name in classes:
        kind = ck.KINDS.index(name.removesuffix(COPY))
        where = np.nonzero(kinds == kind)[0]
        out[name] = []
        for _ in range(n_rounds):
            if not name.endswith(COPY):
                out[name].append((text([int(vocab.clean[i]) for i in rng.choice(where, n_tokens)]), None))
                continue
            chain = [int(rng.choice(where))]
            while len(chain) < 48:
                chain.append(int(succ[chain[-1]]))
            ids = [int(vocab.clean[i]) for i in chain]
            sent = [*ids, int(vocab.clean[0]), *ids[:6]]
            out[name].append((text(sent), sent))
    return out


def _launch(a: argparse.Namespace, k_max: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    build = locate()
    argv = [str(build.server), "-m", str(a.model), "--host", "127.0.0.1", "--port", "0", "-c", "4096", "-np", "1"]
    argv += ["-t", str(a.threads), "--spec-type", a.spec_type, "--spec-draft-n-max", str(k_max)]
    argv += ["--spec-draft-n-min", "0", "--load-mode", "none"]  # weights in RAM: mmapped holes read no memory
    if "ngram-mod" in a.spec_type:
        n_match, n_min, n_max = a.ngram.split(",")
        argv += ["--spec-ngram-mod-n-match", n_match, "--spec-ngram-mod-n-min", n_min, "--spec-ngram-mod-n-max", n_max]
    env = {**os.environ, "LD_LIBRARY_PATH": str(build.lib_dir)}
    fh = log.open("wb")
    proc = subprocess.Popen(
        argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=die_with_parent()
    )
    deadline = time.monotonic() + 300
    url = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited: {log.read_text(errors='replace')[-2000:]}")
        text = log.read_text(errors="replace")
        if not url and "listening on http://" in text:
            url = text.split("listening on ")[1].split()[0].rstrip("/")
        if url:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("llama-server did not become ready in 300 s")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _complete(client: httpx.Client, pid: int, prompt: Prompt, k: int, n_predict: int) -> dict[str, Any]:
    """One streamed greedy completion at draft length ``k``: its timings, and the server's CPU
    seconds from the first streamed token to the end (decode only: prefill excluded)."""
    body = {
        "prompt": prompt[1] or prompt[0],
        "n_predict": n_predict,
        "temperature": 0,
        "speculative.n_max": k,
        "stream": True,
    }
    first: float | None = None
    last: dict[str, Any] = {}
    with client.stream("POST", "/completion", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            if first is None:
                first = _cpu_s(pid)
            last = json.loads(line[6:])
    cpu = _cpu_s(pid) - (first if first is not None else 0.0)
    t = last.get("timings", {})
    out = {k2: t.get(k2, 0) for k2 in ("predicted_n", "predicted_ms", "draft_n", "draft_n_accepted")}
    return {**out, "cpu_s": cpu}


class Adaptive:
    """The proxy's policy for one model, as the proxy runs it."""

    def __init__(self, ks: tuple[int, ...]) -> None:
        self.params = dp.Params(ks=ks)
        self.state = dp.State()
        self.chosen: dict[str, Counter[str]] = defaultdict(Counter)

    def pick(self, prompt: str, counted: bool, name: str) -> tuple[dc.RequestClass, dp.Choice]:
        cls = dc.classify("completions", {"prompt": prompt})
        return cls, self.choose(cls.key, cls.depth, counted, name)

    def choose(self, key: str, depth: str, counted: bool, name: str) -> dp.Choice:
        choice = dp.choose(self.state, key, depth, self.params)
        self.state = dp.counted(self.state, key)
        if counted:
            self.chosen[name][f"K={choice.k} {choice.reason}"] += 1
        return choice

    def learn(self, cls: dc.RequestClass, k: int, timings: dict[str, Any]) -> None:
        self.learn_key(cls.key, cls.depth, k, timings)

    def learn_key(self, key: str, depth: str, k: int, timings: dict[str, Any]) -> None:
        obs = dp.observation(k, timings)
        if obs is not None:
            self.state = dp.observe(self.state, key, depth, obs, self.params)


def _round(client: httpx.Client, a: argparse.Namespace, r: int, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    arms: list[str] = [f"K={k}" for k in ctx["ks"]] + ["adaptive"]
    jobs = [(c, arm) for c in ctx["classes"] for arm in arms]
    random.Random(a.seed * 1000 + r).shuffle(jobs)
    pol: Adaptive = ctx["policy"]
    rows = []
    for cls_name, arm in jobs:
        prompt = ctx["prompts"][cls_name][r]
        if arm == "adaptive":
            cls, choice = pol.pick(prompt[0], r > 0, cls_name)
            k = choice.k
        else:
            cls, k = dc.classify("completions", {"prompt": prompt[0]}), int(arm[2:])
        t = _complete(client, ctx["pid"], prompt, k, a.n_predict)
        if arm == "adaptive" or a.learn_from == "all":
            pol.learn(cls, k, t)
        rows.append({"round": r, "class": cls_name, "key": cls.key, "arm": arm, "k": k, **t})
    return rows


def _replay(path: Path) -> int:
    """The current policy on a recorded run (``--json``), counterfactually: at each of the
    adaptive arm's turns it chooses K and gets the answer the static arm at that K got for the
    same prompt in the same round. No server; every figure is a recorded one."""
    rows = [x for x in json.loads(path.read_text()) if x["arm"] != "adaptive"]
    recorded = [x for x in json.loads(path.read_text()) if x["arm"] == "adaptive"]
    ks = tuple(sorted({x["k"] for x in rows}))
    static = {(x["round"], x["class"], x["k"]): x for x in rows}
    pol = Adaptive(ks)
    for turn in recorded:
        key = turn.get("key", turn["class"])
        choice = pol.choose(key, "<2K", turn["round"] > 0, turn["class"])
        answer = static[(turn["round"], turn["class"], choice.k)]
        pol.learn_key(key, "<2K", choice.k, answer)
        rows.append({**answer, "arm": "adaptive"})
    classes = list(dict.fromkeys(x["class"] for x in rows))
    print(f"replay of {path} ({len(recorded)} adaptive turns): the current policy on the recorded answers")
    _report(rows, ks, pol, classes, cpu=False)
    _report(rows, ks, pol, classes, cpu=True)
    return 0


def _tps(rows: list[dict[str, Any]], cpu: bool = False) -> float:
    """Decode tok/s of ``rows``: tokens over wall decode time, or over the server's CPU seconds."""
    t = sum(x["cpu_s"] for x in rows) if cpu else sum(x["predicted_ms"] for x in rows) / 1000.0
    return sum(x["predicted_n"] - (1 if cpu else 0) for x in rows) / t if t else 0.0


def _report(rows: list[dict[str, Any]], ks: tuple[int, ...], pol: Adaptive, classes: list[str], cpu: bool) -> None:
    counted = [x for x in rows if x["round"] > 0]
    arms = [f"K={k}" for k in ks] + ["adaptive"]
    table = {
        arm: {c: _tps([x for x in counted if x["arm"] == arm and x["class"] == c], cpu) for c in classes}
        for arm in arms
    }
    for arm in arms:
        table[arm]["overall"] = _tps([x for x in counted if x["arm"] == arm], cpu)
    what = "tokens per server CPU second (decode)" if cpu else "tokens / wall decode time"
    print(f"\ndecode tok/s over {len({x['round'] for x in counted})} counted rounds: {what}")
    print(f"{'arm':<10}" + "".join(f"{c:>11}" for c in (*classes, "overall")))
    for arm in arms:
        print(f"{arm:<10}" + "".join(f"{table[arm][c]:>11.2f}" for c in (*classes, "overall")))
    static = [f"K={k}" for k in ks]
    best = max(static, key=lambda s: table[s]["overall"])
    ad = table["adaptive"]
    print(f"adaptive / best static overall ({best}): {ad['overall'] / table[best]['overall']:.3f}")
    for c in classes:
        row = {arm: table[arm][c] for arm in static}
        bc = max(row, key=lambda arm: row[arm])
        line = f"{c:<9} adaptive / best K ({bc}): {ad[c] / table[bc][c]:.3f}"
        line += f"   adaptive / K=0: {ad[c] / table['K=0'][c]:.3f}"
        if cpu:
            line += f"   acceptance at K={max(ks)}: {_acc(counted, c, max(ks))}   chose: {dict(pol.chosen[c])}"
        print(line)


def _acc(rows: list[dict[str, Any]], c: str, k: int) -> str:
    sel = [x for x in rows if x["class"] == c and x["arm"] == f"K={k}"]
    drafted = sum(x["draft_n"] for x in sel)
    return f"{sum(x['draft_n_accepted'] for x in sel) / drafted:.2f}" if drafted else "-"


def main() -> int:
    a = _args()
    if a.replay:
        return _replay(a.replay)
    ks = tuple(sorted({int(k) for k in a.ks.split(",")} | {0}))
    if not a.model.exists():
        write_shaped_model(a.model, quant="f16", q=0.1, scale="bed", profile="kinds")  # F16: see shapes.py
    classes = [c.strip() for c in a.classes.split(",") if c.strip()]
    ctx: dict[str, Any] = {
        "ks": ks,
        "classes": classes,
        "prompts": _prompts(classes, a.rounds + 1, a.prompt_tokens, a.seed),
    }
    ctx["policy"] = Adaptive(ks)
    log = Path(tempfile.mkdtemp(prefix="bench-draft-policy-")) / "llama-server.log"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: no orphaned server
    proc, url = _launch(a, max(ks), log)
    ctx["pid"] = proc.pid
    rows: list[dict[str, Any]] = []
    try:
        with httpx.Client(base_url=url, timeout=900, trust_env=False) as client:
            for r in range(a.rounds + 1):
                t0 = time.monotonic()
                rows += _round(client, a, r, ctx)
                done = [x for x in rows if x["round"] == r]
                print(f"round {r}{' (warm-up)' if r == 0 else ''}: {time.monotonic() - t0:.0f} s, "
                      + ", ".join(f"{arm} {_tps([x for x in done if x['arm'] == arm], cpu=True):.2f}"
                                  for arm in [*(f'K={k}' for k in ks), 'adaptive']), flush=True)  # fmt: skip
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    print(f"\nserver: --spec-type {a.spec_type}" + (f", ngram-mod {a.ngram}" if "ngram-mod" in a.spec_type else ""))
    _report(rows, ks, ctx["policy"], classes, cpu=False)
    _report(rows, ks, ctx["policy"], classes, cpu=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
