#!/usr/bin/env python3
"""Prompt-cache persistence, measured side by side in one run on real llama-server processes.

For each round, twice (with and without persistence, alternating so machine noise hits both):
a replica of the tiny model is stopped and started again (what an unload and reload, or a swap,
does to it) and then asked a question that follows a long prefix (default 1,700 tokens). With
persistence its slot was saved before the stop (``KvPersistence.save``, the ``before_stop``
call) and restored and verified before it served (``KvPersistence.restore``); without, the
replica starts empty. The saved slot holds the prefix itself (a document or system prompt; a
hybrid model reuses a saved state only for a prompt that extends it). Printed: TTFT of that
request (streamed, first token), the ready-to-first-token time including the restore, restore
seconds against the prefill seconds the restore replaced, and the ratios.

Then whether the gated delta-net recurrent state survives save and restore at the pin: a tiny
``qwen35moe`` with random weights answers the same prompt uninterrupted and after a restore;
equal greedy text and equal top-3 log-probabilities mean the state came back (a control with
the prefix's first token changed shows the output depends on the far context).

    python scripts/measure_kv_persist.py [--rounds 3] [--words 420]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from orchestrator.config.schema import Config, ModelConfig, ServerConfig, Timeouts
from orchestrator.launch.argv import ServerArgs
from orchestrator.launch.spec import InstanceSpec
from orchestrator.models.tiny import demo_model, write_tiny_model
from orchestrator.native.build import locate
from orchestrator.supervise.kv_files import KvStore
from orchestrator.supervise.kv_persist import KvPersistence
from orchestrator.supervise.states import SERVING, SupervisorPolicy
from orchestrator.supervise.supervisor import Instance

QUESTION = " and now the question about all of that is what"


def _spec(model: Path, save: Path, ctx: int) -> InstanceSpec:
    build = locate()
    server = ServerArgs(
        program=(str(build.server),), model=model, alias="m", host="127.0.0.1", port=0,
        ctx_size=ctx, parallel=1, threads=2, slot_save_path=save,
    )  # fmt: skip
    return InstanceSpec("m-0", "m", 0, (), {"LD_LIBRARY_PATH": str(build.lib_dir)}, server)


async def _start(spec: InstanceSpec, logs: Path) -> Instance:
    config = Config(server=ServerConfig(timeouts=Timeouts(load=120)), models=[ModelConfig(name="m", path="/x.gguf")])
    inst = Instance(spec, config, log_dir=logs, policy=SupervisorPolicy())
    inst.start()
    deadline = time.monotonic() + 180
    while inst.state not in SERVING:
        if time.monotonic() > deadline:
            raise SystemExit(f"llama-server did not become ready: {inst.message}\n" + "\n".join(inst.log_tail(10)))
        await asyncio.sleep(0.05)
    return inst


async def _ttft(url: str, prompt: str) -> tuple[float, dict[str, Any]]:
    """Seconds to the first streamed token of ``prompt`` (greedy, 4 tokens) and the final timings."""
    body = {"prompt": prompt, "n_predict": 4, "temperature": 0, "cache_prompt": True, "stream": True}
    first = None
    timings: dict[str, Any] = {}
    started = time.perf_counter()
    async with (
        httpx.AsyncClient(trust_env=False, timeout=600) as client,
        client.stream("POST", f"{url}/completion", json=body) as resp,
    ):
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if first is None and event.get("content"):
                first = time.perf_counter() - started
            timings = event.get("timings") or timings
    return (first if first is not None else time.perf_counter() - started), timings


async def _swap_rounds(rounds: int, words: int, work: Path) -> dict[str, list[float]]:
    prefix = " ".join(f"doc{i} alpha beta gamma" for i in range(words))
    spec = _spec(demo_model(), work / "kv" / "m", 4096)
    model = ModelConfig(name="m", path="/x.gguf")
    keys = ("ttft_on", "ttft_off", "ready_on", "ready_off", "restore", "prefill")
    out: dict[str, list[float]] = {k: [] for k in keys}
    inst = await _start(spec, work)  # an earlier life of the model: its slot holds the prefix
    assert inst.base_url is not None
    async with httpx.AsyncClient(trust_env=False, timeout=600) as client:
        body = {"prompt": prefix, "n_predict": 0, "cache_prompt": True}
        (await client.post(f"{inst.base_url}/completion", json=body)).raise_for_status()
    await KvPersistence(KvStore(work / "kv", 1 << 34), [model]).save(model, [inst], "unload")
    await inst.stop(10)
    for r in range(rounds):
        for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
            kv = KvPersistence(KvStore(work / "kv", 1 << 34), [model])  # a fresh process
            inst = await _start(spec, work)
            assert inst.base_url is not None
            began = time.perf_counter()
            if mode == "on":
                await kv.restore(model, [inst])
                st = kv.model(model.name)
                if st.restored != 1:
                    raise SystemExit(f"restore did not happen: {st.row()}")
                out["restore"].append(st.last_restore_s or 0.0)
            ready = time.perf_counter() - began
            ttft, timings = await _ttft(inst.base_url, prefix + QUESTION)
            out[f"ttft_{mode}"].append(ttft)
            out[f"ready_{mode}"].append(ready + ttft)
            if mode == "off":
                out["prefill"].append(timings.get("prompt_ms", 0.0) / 1000)
            else:
                print(f"  round {r}: restored, cache_n={timings.get('cache_n')} prompt_n={timings.get('prompt_n')}")
            await inst.stop(10)
    return out


async def _recurrent(words: int, work: Path) -> str:
    model_path = work / "random.gguf"
    write_tiny_model(model_path, mode="random", seed=1)
    spec = _spec(model_path, work / "kv2" / "m", 4096)
    model = ModelConfig(name="m", path="/x.gguf")
    prefix = " ".join(f"doc{i} alpha beta gamma" for i in range(words))
    body = {"n_predict": 8, "n_probs": 3, "temperature": 0, "cache_prompt": True}
    async with httpx.AsyncClient(trust_env=False, timeout=600) as client:
        inst = await _start(spec, work)
        url = inst.base_url
        await client.post(f"{url}/completion", json={**body, "prompt": prefix, "n_predict": 1})
        await KvPersistence(KvStore(work / "kv2", 1 << 34), [model]).save(model, [inst], "unload")
        base = (await client.post(f"{url}/completion", json={**body, "prompt": prefix + QUESTION})).json()
        await inst.stop(10)
        kv = KvPersistence(KvStore(work / "kv2", 1 << 34), [model])
        inst = await _start(spec, work)
        url = inst.base_url
        await kv.restore(model, [inst])
        again = (await client.post(f"{url}/completion", json={**body, "prompt": prefix + QUESTION})).json()
        other = (await client.post(f"{url}/completion", json={**body, "prompt": "X" + prefix + QUESTION})).json()
        await inst.stop(10)
    same = again["completion_probabilities"] == base["completion_probabilities"] and again["content"] == base["content"]
    control = other["completion_probabilities"] != base["completion_probabilities"]
    return (
        f"recurrent state survives save/restore: {'YES' if same else 'NO'} (restored cache_n="
        f"{again['timings']['cache_n']}, greedy text and top-3 log-probabilities of 8 tokens "
        f"{'identical' if same else 'differ'}; control with the first token changed differs: {control})"
    )


def _summary(out: dict[str, list[float]]) -> None:
    med = {k: statistics.median(v) for k, v in out.items() if v}
    print(f"TTFT after a swap, median of {len(out['ttft_on'])}: with persistence {med['ttft_on']:.3f} s, "
          f"without {med['ttft_off']:.3f} s -> {med['ttft_off'] / med['ttft_on']:.1f}x faster")  # fmt: skip
    print(f"ready-to-first-token incl. restore+verify: with {med['ready_on']:.3f} s, without {med['ready_off']:.3f} s "
          f"-> {med['ready_off'] / med['ready_on']:.1f}x")  # fmt: skip
    print(f"restore {med['restore']:.4f} s vs prefill {med['prefill']:.3f} s of the same prefix "
          f"-> restore takes {med['restore'] / med['prefill']:.4f} of the prefill")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--words", type=int, default=420, help="prefix length (4 tokens-ish per word)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvmeasure-") as tmp:
        work = Path(tmp)
        out = asyncio.run(_swap_rounds(args.rounds, args.words, work))
        print(json.dumps({k: [round(x, 4) for x in v] for k, v in out.items()}))
        _summary(out)
        print(asyncio.run(_recurrent(args.words, work)))


if __name__ == "__main__":
    main()
