"""The GPU check's measurement: interleaved decode runs, their statistics, the recommended K.

``run_rounds`` sends one streamed ``/v1/completions`` request per (endpoint, draft length K) in
each round, in a seeded shuffled order, so drift (clocks, heat, other load) spreads evenly over
every configuration; K = 0 is drafting off for that request (``speculative.n_max: 0``, our
patched llama-server). Endpoints are one llama-server per acceptance rate, reached directly and
through ``orchestrator up``. ``summarize`` turns samples into per-configuration medians with
their spread, speedups paired within each round, bytes read per decoded token (``traffic``) and
the fraction of the memory-bandwidth bound each figure reaches. Used by ``scripts/gpu_check.py``.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import psutil

from orchestrator.models.traffic import Traffic

CUT = "stopped at the time limit"
ADAPTIVE = -1  # the K "arm" the endpoint's draft-length policy chooses per request (speculative.adaptive)


@dataclass(frozen=True)
class Endpoint:
    """Where one model is served: ``path`` is ``direct`` (llama-server) or ``up`` (the proxy)."""

    path: str
    q: float
    base_url: str
    model: str
    server_pid: int | None = None  # the llama-server behind it: its CPU time per request is read


@dataclass
class Sample:
    """One measured request. tok/s figures are decode rates (tokens after the first per second)."""

    round: int
    path: str
    q: float
    k: int
    tokens: int
    client_tok_s: float  # tokens / (request wall time - the server's prompt time), at the client
    server_tok_s: float  # llama-server's own timings.predicted_per_second
    ttft_s: float
    draft_n: int
    draft_n_accepted: int
    error: str | None = None
    server_cpu_s: float | None = None  # CPU seconds llama-server used during the request (all threads)


def request_body(ep: Endpoint, k: int, n_predict: int, prompt: str) -> dict[str, Any]:
    """A greedy streamed /v1/completions body at draft length ``k`` (0: drafting off;
    ``ADAPTIVE``: no draft length, the endpoint's policy chooses)."""
    body: dict[str, Any] = {
        "model": ep.model,
        "prompt": prompt,
        "max_tokens": n_predict,
        "temperature": 0,
        "stream": True,
        "cache_prompt": False,
    }
    if k != ADAPTIVE:
        body.update({"speculative.n_max": k, "speculative.n_min": min(k, 1)})
    return body


async def one_request(client: httpx.AsyncClient, ep: Endpoint, k: int, n_predict: int, prompt: str, rnd: int) -> Sample:
    """Stream one completion and time it; HTTP and stream errors become a Sample with ``error``."""
    cpu0 = _cpu_seconds(ep.server_pid)
    t0 = time.perf_counter()
    stamps: list[float] = []
    timings: dict[str, Any] = {}
    try:
        body = request_body(ep, k, n_predict, prompt)
        async with client.stream("POST", f"{ep.base_url}/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode("utf-8", errors="replace")[:200]
                return _failed(rnd, ep, k, f"HTTP {resp.status_code}: {text}")
            async for line in resp.aiter_lines():
                if not line.startswith("data:") or line[5:].strip() in ("", "[DONE]"):
                    continue
                event = json.loads(line[5:])
                if any((c.get("text") or "") for c in event.get("choices") or []):
                    stamps.append(time.perf_counter())
                timings = event.get("timings") or timings
    except (httpx.HTTPError, ValueError) as err:
        return _failed(rnd, ep, k, f"{type(err).__name__}: {err}")
    cpu1 = _cpu_seconds(ep.server_pid)
    n = int(timings.get("predicted_n") or len(stamps))
    # streamed chunks arrive in bursts when drafts are accepted, so the client's decode time is
    # the whole request's wall time less the prompt processing the server reports
    span = time.perf_counter() - t0 - float(timings.get("prompt_ms") or 0.0) / 1000.0
    return Sample(
        round=rnd,
        path=ep.path,
        q=ep.q,
        k=k,
        tokens=n,
        client_tok_s=n / span if span > 0 else 0.0,
        server_tok_s=float(timings.get("predicted_per_second") or 0.0),
        ttft_s=(stamps[0] - t0) if stamps else 0.0,
        draft_n=int(timings.get("draft_n") or 0),
        draft_n_accepted=int(timings.get("draft_n_accepted") or 0),
        server_cpu_s=cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None,
    )


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (None when unknown or gone)."""
    if pid is None:
        return None
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(t.user + t.system)


def _failed(rnd: int, ep: Endpoint, k: int, why: str) -> Sample:
    return Sample(rnd, ep.path, ep.q, k, 0, 0.0, 0.0, 0.0, 0, 0, error=why)


async def run_rounds(
    endpoints: list[Endpoint],
    ks: list[int],
    *,
    n_predict: int,
    deadline: float,
    max_rounds: int,
    on_round: Callable[[int, float], None] | None = None,
    seed: int = 0,
) -> list[Sample]:
    """Run rounds until ``max_rounds`` or until another round would end after ``deadline``
    (``time.monotonic()`` seconds; each round is timed, the next is assumed as long as the
    longest so far). Round 0 is a warm-up and is measured but marked by ``round == 0``."""
    rng = random.Random(seed)
    samples: list[Sample] = []
    longest = 0.0
    limits = httpx.Limits(max_keepalive_connections=0)  # a fresh connection per stream (see bench.requests)
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=10.0), limits=limits, trust_env=False) as client:
        for rnd in range(max_rounds):
            if rnd and time.monotonic() + longest > deadline:
                break
            started = time.monotonic()
            plan = [(ep, k) for ep in endpoints for k in ks if k != ADAPTIVE or ep.path == "up"]
            rng.shuffle(plan)
            for ep, k in plan:
                prompt = f"Round {rnd}: count on from here, {ep.path} {k}."
                left = deadline - time.monotonic()
                if left <= 0:
                    return samples
                try:
                    sample = await asyncio.wait_for(one_request(client, ep, k, n_predict, prompt, rnd), timeout=left)
                except TimeoutError:  # the limit cut this round short: its requests so far still count
                    samples.append(_failed(rnd, ep, k, CUT))
                    return samples
                samples.append(sample)
            longest = max(longest, time.monotonic() - started)
            if on_round:
                on_round(rnd, time.monotonic() - started)
    return samples


def _spread(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None, "iqr": None}
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {
        "n": len(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "iqr": q[2] - q[0],
    }


def summarize(samples: list[Sample], traffic: Traffic | None, bandwidth: float | None) -> list[dict[str, Any]]:
    """One row per (path, q, K): decode tok/s (client and server) with spread, acceptance,
    tokens per step, speedup vs K = 0 paired by round, bytes per token, the fraction of the bound
    and the speedup a purely bandwidth-bound machine would show (fewer weight bytes per token).
    Warm-up samples (round 0) are left out when later rounds exist."""
    good = [s for s in samples if s.error is None and s.tokens > 1]
    if any(s.round > 0 for s in good):
        good = [s for s in good if s.round > 0]
    base = {(s.round, s.path, s.q): s.client_tok_s for s in good if s.k == 0}
    base_cpu = {(s.round, s.path, s.q): s.server_cpu_s / s.tokens for s in good if s.k == 0 and s.server_cpu_s}
    rows = []
    for path, q, k in sorted({(s.path, s.q, s.k) for s in good}):
        mine = [s for s in good if (s.path, s.q, s.k) == (path, q, k)]
        drafted = sum(s.draft_n for s in mine)
        acc = sum(s.draft_n_accepted for s in mine) / drafted if drafted else None
        tps = 1.0 + k * acc if (k and acc is not None) else 1.0
        if k == ADAPTIVE:  # K varies per request: tokens per verification step, counted
            tokens = sum(s.tokens for s in mine)
            tps = tokens / max(1, tokens - sum(s.draft_n_accepted for s in mine))
        ratios = [s.client_tok_s / base[(s.round, path, q)] for s in mine if base.get((s.round, path, q))]
        client = _spread([s.client_tok_s for s in mine])
        row: dict[str, Any] = {
            "path": path,
            "q": q,
            "k": k,
            "decode_tok_s": client,
            "server_tok_s": _spread([s.server_tok_s for s in mine]),
            # CPU seconds per token: what a busy shared machine distorts least (wall time waits for others)
            "server_cpu_ms_per_token": _spread([1e3 * s.server_cpu_s / s.tokens for s in mine if s.server_cpu_s]),
            "cpu_speedup": _spread(
                [
                    base_cpu[(s.round, path, q)] / (s.server_cpu_s / s.tokens)
                    for s in mine
                    if s.server_cpu_s and base_cpu.get((s.round, path, q))
                ]
            ),
            "acceptance": acc,
            "tokens_per_step": tps,
            "speedup": _spread(ratios),
        }
        if traffic is not None and client["median"] and k != ADAPTIVE:
            per_token = traffic.per_token(k, tps)
            row["bytes_per_token"] = per_token
            # the speedup a purely bandwidth-bound machine would show at this acceptance
            row["bandwidth_bound_speedup"] = traffic.trunk_step(1) / per_token
            row["achieved_bytes_per_s"] = per_token * float(client["median"])
            row["bandwidth_fraction"] = row["achieved_bytes_per_s"] / bandwidth if bandwidth else None
        rows.append(row)
    return rows


def recommend(rows: list[dict[str, Any]], path: str | None = None) -> dict[str, Any]:
    """Per acceptance rate: the K with the highest median decode tok/s on ``path``, or 0 when no
    K beats no speculation by more than the spread (the speedup's minimum must exceed 1).
    ``path`` defaults to ``up`` when measured, else ``direct``."""
    out: dict[str, Any] = {}
    if path is None:
        path = "up" if any(r["path"] == "up" for r in rows) else "direct"
    for q in sorted({r["q"] for r in rows if r["path"] == path}):
        mine = [r for r in rows if r["path"] == path and r["q"] == q and r["decode_tok_s"]["median"] and r["k"] >= 0]
        best = max(mine, key=lambda r: r["decode_tok_s"]["median"], default=None)
        if best is None:
            continue
        sure = best["k"] > 0 and (best["speedup"]["min"] or 0.0) > 1.0
        out[f"{1 - q:.2f}"] = {
            "k": best["k"] if sure else 0,
            "best_median_k": best["k"],
            "speedup_median": best["speedup"]["median"],
            "why": "faster than K=0 in every round" if sure else "no K beat K=0 in every round: keep drafting off",
        }
    return out


def samples_json(samples: list[Sample]) -> list[dict[str, Any]]:
    return [asdict(s) for s in samples]
