"""``orchestrator bench``: sweep the draft length K against a no-speculation baseline.

How a sweep runs (the same launch path as ``orchestrator up``, without the proxy):

1. models.yaml is loaded, one model is picked, and ``launch.plan_launch`` plans its replica 0.
   From that plan come the bench instances, each a supervised llama-server
   (``supervisor.Supervisor``) on an OS-picked port:

   - ``<model>-bench-spec``: speculation on, launched with ``--spec-draft-n-max max(K)``;
   - ``<model>-bench-k0``: the same argv without speculation (``launch.with_argv_overrides``);
     every K = 0 request goes here.

2. The spec instance starts first and is probed: a request carrying ``speculative.n_max`` whose
   generation settings report that value back means the binary has the per-request draft-length
   patch (``native/patches/0002-per-request-draft-length.patch``). Then every K > 0 is one
   request field on that instance. Without the patch each K gets its own instance
   (``<model>-bench-k<K>``, launched with ``--spec-draft-n-max K``): a model reload per K.
3. Every instance gets a warm-up request (not recorded) once it is ready.
4. Requests run one at a time, interleaved so that drift (thermal, other load) hits all K
   alike: on a CPU, where idle instances cost little (the GGUF is mmapped and shared), every
   instance stays up and each prompt is sent at every K before the next prompt, the K order
   rotating from prompt to prompt and round to round. On GPUs, where two copies of a large
   model may not fit, one instance runs at a time and the instance order snakes (A B, B A,
   A B...), so consecutive rounds share a load and each instance is reloaded about once per
   round.
5. Each request is a streamed ``/completion`` of the chat-templated prompt with
   ``cache_prompt: false`` (every repetition pays its prefill, so TTFT is comparable). It
   records TTFT (time to the first streamed content byte), llama-server's ``timings``
   (decode tok/s, ``draft_n``, ``draft_n_accepted``) and the draft length the server reports
   applying. Statistics and their formulas are in :mod:`orchestrator.bench_stats`; files and
   analysis lines in :mod:`orchestrator.bench_report`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from orchestrator.bench_prompts import Prompt, select_prompts
from orchestrator.bench_stats import RequestResult
from orchestrator.errors import UserError

if TYPE_CHECKING:
    from orchestrator.build import BuildInfo
    from orchestrator.config import Config, ModelConfig
    from orchestrator.launch import InstanceSpec
    from orchestrator.supervisor import Instance, Supervisor

PATCH_NAME = "per-request-draft-length"  # substring of the patch file name in the build manifest
N_MAX_FIELD = "speculative.n_max"  # request / generation-settings key added by that patch
N_MIN_FIELD = "speculative.n_min"
WARMUP_PROMPT = "Say hello."
WARMUP_TOKENS = 64  # enough decode steps to page in the weights and settle the caches
HEADER_HASH_BYTES = 32 * 1024 * 1024  # the GGUF header + metadata (tokenizer included) fit in this


# --------------------------------------------------------------------------- argument parsing


# Beyond this, a^(K+1) is ~0 for any real acceptance rate; a bigger K only costs memory and time.
MAX_DRAFT_LENGTH = 32


def parse_int_list(text: str, *, option: str, minimum: int = 0) -> list[int]:
    """Parse ``"0,1,2"`` into sorted unique ints >= ``minimum``.

    Raises:
        UserError: on an empty list, a non-integer or a value below ``minimum``.
    """
    values: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise UserError(f"{option}: {part!r} is not an integer", hint=f"e.g. {option} 0,1,2,4") from None
        if value < minimum:
            raise UserError(f"{option}: {value} is below {minimum}", hint=f"e.g. {option} 0,1,2,4")
        values.add(value)
    if not values:
        raise UserError(f"{option}: no values given", hint=f"e.g. {option} 0,1,2,4")
    return sorted(values)


def parse_seeds(text: str) -> list[int]:
    """Parse ``--seeds`` (comma-separated ints, order kept, duplicates dropped)."""
    out: list[int] = []
    for value in parse_int_list(text, option="--seeds", minimum=0):
        if value not in out:
            out.append(value)
    return out


# --------------------------------------------------------------------------- the plan


@dataclass
class Variant:
    """One llama-server configuration of the sweep.

    ``ks``: the draft lengths measured on it; ``per_request``: K travels as a request field
    (patched binary) rather than as the launch flag.
    """

    spec: InstanceSpec
    ks: tuple[int, ...]
    per_request: bool = False

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Task:
    """One request of the sweep: repetition ``rep``, sampling ``seed``, prompt index, K, variant index."""

    rep: int
    seed: int
    prompt_index: int
    k: int
    variant: int


def schedule(variants: Sequence[Variant], *, n_prompts: int, reps: int, seeds: Sequence[int], together: bool) -> list[Task]:
    """The request order of the sweep.

    ``together`` (all instances up at once): per round, per seed, per prompt, every K once,
    the K order rotated by round + prompt so no K always follows the same one. Otherwise
    (one instance at a time): per round the variants in snake order (forward on even rounds,
    backward on odd ones), and inside a variant per seed, per prompt, its Ks rotated alike.
    """
    tasks: list[Task] = []

    def rotated(ks: Sequence[int], by: int) -> list[int]:
        if not ks:
            return []
        by %= len(ks)
        return list(ks[by:]) + list(ks[:by])

    owner = {k: i for i, v in enumerate(variants) for k in v.ks}
    all_ks = sorted(owner)
    for rep in range(reps):
        if together:
            for seed in seeds:
                for p in range(n_prompts):
                    tasks.extend(Task(rep, seed, p, k, owner[k]) for k in rotated(all_ks, rep + p))
            continue
        order = list(range(len(variants)))
        if rep % 2:
            order.reverse()
        for vi in order:
            for seed in seeds:
                for p in range(n_prompts):
                    tasks.extend(Task(rep, seed, p, k, vi) for k in rotated(variants[vi].ks, rep + p))
    return tasks


def bench_spec(spec: InstanceSpec, *, suffix: str, n_max: int | None) -> InstanceSpec:
    """A copy of ``spec`` for the bench: its own name, an OS-picked port, and (for a speculative
    spec) ``--spec-draft-n-max n_max`` with ``--spec-draft-n-min`` lowered to at most ``n_max``."""
    from orchestrator.launch import with_argv_overrides

    n_min = None
    if n_max is not None and spec.spec_type is not None:
        n_min = min(spec.n_min if spec.n_min is not None else 0, n_max)
    else:
        n_max = None
    moved = with_argv_overrides(spec, n_max=n_max, n_min=n_min, port=0)
    return dataclasses.replace(moved, name=f"{spec.model}-bench-{suffix}")


def has_patch(manifest: dict[str, Any]) -> bool:
    """Whether the build manifest lists the per-request draft-length patch."""
    for patch in manifest.get("patches") or []:
        name = patch.get("name") if isinstance(patch, dict) else patch
        if isinstance(name, str) and PATCH_NAME in name:
            return True
    return False


def reported_n_max(settings: Any) -> int | None:
    """The draft length a response's ``generation_settings`` reports (flat or nested key), or None."""
    if not isinstance(settings, dict):
        return None
    value = settings.get(N_MAX_FIELD)
    if value is None and isinstance(settings.get("speculative"), dict):
        value = settings["speculative"].get("n_max")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------- requests


@dataclass
class Completion:
    """One streamed /completion: seconds to the first content, final event fields, output text."""

    ttft_s: float
    timings: dict[str, Any]
    settings: dict[str, Any]
    text: str
    tokens_predicted: int


async def complete(
    client: httpx.AsyncClient,
    base_url: str,
    body: dict[str, Any],
) -> Completion:
    """POST a streamed ``/completion`` and collect it.

    Args:
        client: an httpx client (the bench uses one that never reuses a connection, because at
            the pin llama-server closes a connection after a stream while advertising keep-alive).
        base_url: ``http://127.0.0.1:PORT``.
        body: the request (``stream`` is forced on).

    Returns:
        :class:`Completion`; ``ttft_s`` is from sending to the first event with non-empty
        ``content`` (the final event's ``timings.prompt_ms`` when no content was streamed).

    Raises:
        UserError: on an HTTP error status (with the server's message) or a stream that ends
            without its final event.
        httpx.TransportError: when the connection fails.
    """
    payload = dict(body, stream=True)
    t0 = time.perf_counter()
    ttft: float | None = None
    parts: list[str] = []
    final: dict[str, Any] | None = None
    async with client.stream("POST", f"{base_url}/completion", json=payload) as resp:
        if resp.status_code != 200:
            raw = (await resp.aread()).decode("utf-8", errors="replace")
            try:
                message = json.loads(raw)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = raw[:300]
            raise UserError(f"{base_url}/completion answered {resp.status_code}: {message}")
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if not data or data == "[DONE]":
                continue
            event = json.loads(data)
            content = event.get("content") or ""
            if content:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                parts.append(content)
            if event.get("stop"):
                final = event
    if final is None:
        raise UserError(f"{base_url}/completion: the stream ended without its final event")
    timings = final.get("timings") or {}
    if ttft is None:
        ttft = float(timings.get("prompt_ms") or 0.0) / 1000.0
    return Completion(
        ttft_s=ttft,
        timings=timings,
        settings=final.get("generation_settings") or {},
        text="".join(parts),
        tokens_predicted=int(final.get("tokens_predicted") or timings.get("predicted_n") or 0),
    )


def request_body(prompt: str, *, k: int, per_request: bool, n_min: int | None, n_predict: int, temperature: float, seed: int) -> dict[str, Any]:
    """The /completion body for one bench request at draft length ``k`` (tokens)."""
    body: dict[str, Any] = {
        "prompt": prompt,
        "n_predict": n_predict,
        "temperature": temperature,
        "seed": seed,
        "cache_prompt": False,
    }
    if per_request and k > 0:
        body[N_MAX_FIELD] = k
        body[N_MIN_FIELD] = min(n_min if n_min is not None else 0, k)
    return body


# --------------------------------------------------------------------------- the run


@dataclass
class SweepRun:
    """Everything a finished sweep hands to the report."""

    results: list[RequestResult]
    mode: str  # "per-request" or "relaunch"
    together: bool
    instances: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)


class Sweep:
    """Runs the instances and requests of one sweep (see the module docstring)."""

    def __init__(
        self,
        *,
        config: Config,
        model: ModelConfig,
        base: InstanceSpec,
        ks: Sequence[int],
        prompts: Sequence[Prompt],
        n_predict: int,
        reps: int,
        seeds: Sequence[int],
        temperature: float,
        log_dir: Path,
        manifest_patched: bool,
        progress: Any = None,
    ) -> None:
        self.config = config
        self.model = model
        self.base = base
        self.ks = list(ks)
        self.prompts = list(prompts)
        self.n_predict = n_predict
        self.reps = reps
        self.seeds = list(seeds)
        self.temperature = temperature
        self.log_dir = log_dir
        self.manifest_patched = manifest_patched
        self.progress = progress
        self.together = not base.gpus  # CPU: instances share the mmapped GGUF, keep all up
        self.warnings: list[str] = []
        self._running: dict[str, tuple[Supervisor, Instance]] = {}
        self._seen: dict[str, dict[str, Any]] = {}
        self._templated: dict[int, str] = {}
        self._warmed: dict[str, float | None] = {}  # instance name -> ready_at of the warmed-up launch
        self._client: httpx.AsyncClient | None = None

    # ---- instances

    async def _start(self, variants: Sequence[Variant]) -> None:
        from orchestrator.supervisor import ProcessState, Supervisor

        todo = [v for v in variants if v.name not in self._running]
        if not todo:
            return
        if not self.together:
            await self._stop_all()
        sup = Supervisor([v.spec for v in todo], self.config, log_dir=self.log_dir)
        for v, inst in zip(todo, sup.instances):
            self._running[v.name] = (sup, inst)
        self._status(f"loading {', '.join(v.name for v in todo)}")
        await sup.start()
        timeout = float(self.config.server.timeouts.load) * 3  # the supervisor extends loads while the child logs
        if not await sup.wait_all_ready(timeout):
            bad = [i for i in sup.instances if i.state is not ProcessState.READY]
            lines = []
            for inst in bad:
                lines.append(f"{inst.name}: {inst.state.value}: {inst.message or 'not ready'}")
                lines += [f"  | {t}" for t in inst.log_tail(8)]
            raise UserError(
                "bench instance did not become ready:\n" + "\n".join(lines),
                hint=f"full logs in {self.log_dir}",
            )
        for v, inst in zip(todo, sup.instances):
            await self._warm_up(v, inst)

    async def _ensure_warm(self, v: Variant, inst: Instance) -> None:
        """Warm up again when the supervisor relaunched the instance (a crash) since the last warm-up."""
        if self._warmed.get(v.name) != inst.ready_at:
            self.warnings.append(f"{inst.name} was relaunched during the sweep (restarts: {inst.restarts}); "
                                 f"see {inst.log_path}")
            await self._warm_up(v, inst)

    async def _stop_all(self) -> None:
        sups = {id(s): s for s, _ in self._running.values()}
        for name, (_, inst) in self._running.items():
            self._seen[name] = inst.snapshot()
        self._running.clear()
        grace = float(self.config.server.timeouts.shutdown_grace)
        await asyncio.gather(*(s.stop(grace) for s in sups.values()))

    def _instance(self, v: Variant) -> Instance:
        from orchestrator.supervisor import ProcessState

        inst = self._running[v.name][1]
        if inst.state is ProcessState.DEGRADED:
            raise UserError(
                f"{inst.name} fell back to serving without speculation ({'; '.join(inst.warnings)}), "
                "so its K measurements would be wrong",
                hint=f"see {inst.log_path}",
            )
        return inst

    async def _warm_up(self, v: Variant, inst: Instance) -> None:
        self._status(f"warming up {v.name}")
        self._warmed[v.name] = inst.ready_at
        k = max(v.ks)
        body = request_body(WARMUP_PROMPT, k=k, per_request=v.per_request, n_min=v.spec.n_min,
                            n_predict=min(WARMUP_TOKENS, self.n_predict), temperature=0.0, seed=0)
        await self._send(inst, body)

    async def _probe_patch(self, v: Variant, inst: Instance) -> bool:
        """Whether ``inst`` honours a per-request ``speculative.n_max`` (reports it back)."""
        # an unpatched server reports no speculative.n_max at all; the patched one reports the
        # effective (clamped) value, which for a K <= the launch n_max is K itself
        probe_k = min(k for k in v.ks if k > 0)
        body = request_body(WARMUP_PROMPT, k=probe_k, per_request=True, n_min=v.spec.n_min,
                            n_predict=2, temperature=0.0, seed=0)
        comp = await self._send(inst, body)
        return reported_n_max(comp.settings) == probe_k

    async def _send(self, inst: Instance, body: dict[str, Any]) -> Completion:
        assert self._client is not None
        if inst.base_url is None:
            raise UserError(f"{inst.name} has no address yet")
        inst.in_flight += 1
        try:
            try:
                comp = await complete(self._client, inst.base_url, body)
            except httpx.TransportError as err:
                # a crash mid-request: the supervisor restarts the child; retry once when it serves
                self.warnings.append(f"{inst.name}: request failed ({type(err).__name__}); retried after a restart")
                await self._wait_relaunched(inst)
                assert inst.base_url is not None
                try:
                    comp = await complete(self._client, inst.base_url, body)
                except httpx.TransportError as again:
                    tail = " | ".join(inst.log_tail(5))
                    raise UserError(f"{inst.name}: request failed twice ({again!r}); log: {tail}",
                                    hint=f"see {inst.log_path}") from None
        finally:
            inst.in_flight -= 1
        if comp.timings:
            inst.record_timings(comp.timings)
        return comp

    async def _wait_relaunched(self, inst: Instance) -> None:
        """After a failed request: wait for the supervisor to notice and relaunch, then to serve."""
        from orchestrator.supervisor import SERVING, TERMINAL

        ready_before = inst.ready_at
        notice = time.monotonic() + 5.0  # the supervisor polls the child every second or faster
        deadline = time.monotonic() + 3 * float(self.config.server.timeouts.load)
        while True:
            if inst.state in TERMINAL:
                raise UserError(f"{inst.name} stopped serving: {inst.message}", hint=f"see {inst.log_path}")
            relaunched = inst.ready_at != ready_before
            if inst.state in SERVING and (relaunched or time.monotonic() > notice):
                return
            if time.monotonic() > deadline:
                raise UserError(f"{inst.name} did not serve again in time: {inst.message}", hint=f"see {inst.log_path}")
            await asyncio.sleep(0.2)

    def _status(self, text: str) -> None:
        if self.progress is not None:
            self.progress.update(self.progress.task_ids[0], description=text)

    # ---- prompts

    async def _templated_prompt(self, inst: Instance, index: int) -> str:
        """The chat-templated text of prompt ``index`` (via llama-server's ``/apply-template``)."""
        if index in self._templated:
            return self._templated[index]
        assert self._client is not None and inst.base_url is not None
        body: dict[str, Any] = {"messages": [{"role": "user", "content": self.prompts[index].prompt}]}
        if self.model.thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": self.model.thinking}
        resp = await self._client.post(f"{inst.base_url}/apply-template", json=body)
        if resp.status_code != 200:
            raise UserError(f"{inst.name}/apply-template answered {resp.status_code}: {resp.text[:300]}")
        text = resp.json().get("prompt")
        if not isinstance(text, str):
            raise UserError(f"{inst.name}/apply-template returned no prompt")
        self._templated[index] = text
        return text

    # ---- the sweep

    def _variants(self) -> list[Variant]:
        spec_ks = tuple(k for k in self.ks if k > 0)
        out: list[Variant] = []
        if spec_ks:
            out.append(Variant(bench_spec(self.base, suffix="spec", n_max=max(spec_ks)), spec_ks))
        if 0 in self.ks:
            from orchestrator.launch import with_argv_overrides

            off = with_argv_overrides(self.base, spec_off=True, port=0)
            out.append(Variant(bench_spec(off, suffix="k0", n_max=None), (0,)))
        return out

    async def run(self) -> SweepRun:
        """Run the whole sweep; always stops every instance it started."""
        if any(k > 0 for k in self.ks) and self.base.spec_type is None:
            raise UserError(
                f"model {self.model.name!r} runs without speculative decoding, so only K=0 can be measured",
                hint="the GGUF needs a NextN/MTP head (check with `orchestrator inspect`) or a `speculative.draft`; "
                "remove `speculative.type: none` if it is set, or sweep --k 0",
            )
        timeouts = self.config.server.timeouts
        self._client = httpx.AsyncClient(
            trust_env=False,
            limits=httpx.Limits(max_keepalive_connections=0),
            timeout=httpx.Timeout(connect=timeouts.connect, read=timeouts.first_byte, write=timeouts.connect, pool=None),
        )
        try:
            return await self._run()
        finally:
            await self._stop_all()
            await self._client.aclose()

    async def _run(self) -> SweepRun:
        variants = self._variants()
        mode = "baseline only"
        if variants and variants[0].ks != (0,):
            spec_v = variants[0]
            await self._start([spec_v])
            patched = await self._probe_patch(spec_v, self._instance(spec_v))
            if self.manifest_patched and not patched:
                self.warnings.append(
                    "the build manifest lists the per-request draft-length patch but the server did not report "
                    f"{N_MAX_FIELD} back; relaunching per K instead"
                )
            if patched:
                spec_v.per_request = True
                mode = "per-request"
            else:
                mode = "relaunch"
                k_max = max(spec_v.ks)
                spec_v.ks = (k_max,)
                extra = [Variant(bench_spec(self.base, suffix=f"k{k}", n_max=k), (k,)) for k in self.ks if 0 < k < k_max]
                variants = [spec_v] + variants[1:] + extra
        tasks = schedule(variants, n_prompts=len(self.prompts), reps=self.reps, seeds=self.seeds, together=self.together)
        if self.progress is not None:
            self.progress.update(self.progress.task_ids[0], total=len(tasks), completed=0)
        if self.together:
            await self._start(variants)
        results: list[RequestResult] = []
        for task in tasks:
            v = variants[task.variant]
            await self._start([v])
            inst = self._instance(v)
            await self._ensure_warm(v, inst)
            prompt = self.prompts[task.prompt_index]
            self._status(f"K={task.k} {prompt.domain} rep {task.rep + 1}/{self.reps}")
            text = await self._templated_prompt(inst, task.prompt_index)
            body = request_body(text, k=task.k, per_request=v.per_request, n_min=v.spec.n_min,
                                n_predict=self.n_predict, temperature=self.temperature, seed=task.seed)
            comp = await self._send(inst, body)
            results.append(self._result(task, prompt, inst, comp))
            if self.progress is not None:
                self.progress.advance(self.progress.task_ids[0])
        self._check(results, mode)
        for name, (_, inst) in self._running.items():
            self._seen[name] = inst.snapshot()
        for name, row in self._seen.items():
            for w in row.get("warnings") or []:
                self.warnings.append(f"{name}: {w}")
        return SweepRun(results=results, mode=mode, together=self.together, instances=list(self._seen.values()),
                        warnings=self.warnings)

    def _result(self, task: Task, prompt: Prompt, inst: Instance, comp: Completion) -> RequestResult:
        t = comp.timings
        return RequestResult(
            k=task.k,
            domain=prompt.domain,
            prompt_index=task.prompt_index,
            rep=task.rep,
            seed=task.seed,
            ttft_s=comp.ttft_s,
            prompt_ms=float(t.get("prompt_ms") or 0.0),
            predicted_n=int(t.get("predicted_n") or comp.tokens_predicted),
            predicted_ms=float(t.get("predicted_ms") or 0.0),
            decode_tps=float(t.get("predicted_per_second") or 0.0),
            drafted=int(t.get("draft_n") or 0),
            accepted=int(t.get("draft_n_accepted") or 0),
            n_max_effective=reported_n_max(comp.settings) if task.k > 0 else None,
            instance=inst.name,
            text_sha1=hashlib.sha1(comp.text.encode("utf-8")).hexdigest(),
        )

    def _check(self, results: Sequence[RequestResult], mode: str) -> None:
        for k in sorted({r.k for r in results if r.k > 0}):
            rows = [r for r in results if r.k == k]
            if all(r.drafted == 0 for r in rows):
                self.warnings.append(f"K={k}: nothing was drafted (timings.draft_n = 0); speculation was not active")
            if mode == "per-request":
                wrong = sorted({r.n_max_effective for r in rows if r.n_max_effective != k}, key=str)
                if wrong:
                    self.warnings.append(f"K={k}: the server reported applying n_max {wrong} instead")


# --------------------------------------------------------------------------- manifest


def header_sha256(path: Path, limit: int = HEADER_HASH_BYTES) -> str:
    """sha256 of the first ``limit`` bytes of ``path`` (a GGUF's header, metadata and tokenizer)
    plus its size, so identical files match without reading tens of GB."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        h.update(fh.read(limit))
    h.update(str(path.stat().st_size).encode())
    return h.hexdigest()


def _model_facts(path: Path) -> dict[str, Any] | None:
    try:
        from orchestrator.gguf_info import read_model_facts
    except ImportError:
        return None
    try:
        facts = read_model_facts(path)
    except Exception as err:  # noqa: BLE001 - facts are informational in the manifest
        return {"error": str(err)}
    if dataclasses.is_dataclass(facts) and not isinstance(facts, type):
        raw = dataclasses.asdict(facts)
    elif hasattr(facts, "model_dump"):
        raw = facts.model_dump()
    else:
        raw = dict(vars(facts))
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in raw.items() if not callable(v)}


def manifest(*, build: BuildInfo, gpus: list[Any], gpu_source: str, spec: InstanceSpec) -> dict[str, Any]:
    """What the results depend on: build (commit, patches, backend), GPUs, host, model hash and facts."""
    m = build.manifest
    patches = [p.get("name") if isinstance(p, dict) else p for p in (m.get("patches") or [])]
    gguf = Path(spec.gguf).resolve()
    model: dict[str, Any] = {"path": str(gguf), "size_bytes": gguf.stat().st_size if gguf.exists() else None}
    if gguf.exists():
        model["header_sha256"] = header_sha256(gguf)
        model["header_sha256_bytes"] = HEADER_HASH_BYTES
        model["facts"] = _model_facts(gguf)
    if spec.draft is not None and Path(spec.draft).exists():
        model["draft"] = {"path": str(spec.draft), "header_sha256": header_sha256(Path(spec.draft))}
    return {
        "build": {
            "bin_dir": str(build.bin_dir),
            "upstream_commit": m.get("upstream_commit"),
            "version": m.get("version"),
            "patches": patches,
            "backend": m.get("backend"),
            "cuda_arch": m.get("cuda_arch"),
            "key": m.get("key"),
        },
        "gpus": [dataclasses.asdict(g) if dataclasses.is_dataclass(g) else str(g) for g in gpus],
        "gpu_source": gpu_source,
        "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "model": model,
        "argv": list(spec.argv),
    }


# --------------------------------------------------------------------------- the command


def pick_model(config: Config, name: str | None) -> ModelConfig:
    """The model to bench: ``name`` (or alias), or the only model of the config.

    Raises:
        UserError: no such model, or several models and no name.
    """
    names = ", ".join(m.name for m in config.models)
    if name is None:
        if len(config.models) == 1:
            return config.models[0]
        raise UserError(f"{config.path or 'models.yaml'} has {len(config.models)} models; name one",
                        hint=f"orchestrator bench MODEL  (models: {names})")
    try:
        return config.model(name)
    except KeyError:
        raise UserError(f"no model {name!r} in {config.path or 'models.yaml'}", hint=f"models: {names}") from None


def _bench_config(config: Config, model: ModelConfig) -> Config:
    """The config narrowed to ``model``, with the acceptance fallback off (the bench wants every
    K measured as launched, and reports low acceptance itself)."""
    spec = model.speculative.model_copy(update={"spec_fallback": "warn"})
    one = model.model_copy(update={"speculative": spec})
    narrowed = config.model_copy(update={"models": [one]})
    narrowed.path = config.path
    return narrowed


def cli_bench(
    model: str | None,
    *,
    config: Path,
    k: str,
    prompts: str,
    prompts_file: Path | None,
    n_predict: int,
    reps: int,
    seeds: str,
    temperature: float,
    out: Path,
    apply: bool,
) -> int:
    """Run ``orchestrator bench``: sweep K, write the results folder, optionally apply the best K.

    Args:
        model: model name or alias from models.yaml (None: the only model).
        config: path of models.yaml.
        k: comma-separated draft lengths (tokens); 0 is the no-speculation baseline.
        prompts: comma-separated built-in prompt sets (math, code, general).
        prompts_file: JSONL with ``{"domain", "prompt"}`` per line (replaces the default sets).
        n_predict: tokens generated per request.
        reps: repetitions of every (K, prompt, seed).
        seeds: comma-separated sampling seeds (each repetition runs every seed).
        temperature: sampling temperature (0 = greedy; then outputs match across K).
        out: results folder (created; files of an earlier run there are replaced).
        apply: write the recommended K into models.yaml (``speculative.n_max``, or
            ``type: none`` when K = 0 wins), printing the diff.

    Returns:
        0 on success.

    Raises:
        UserError: bad options, config, missing build, an instance that fails to load, a
            request error.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from orchestrator import bench_report, bench_stats, build, gpus as gpus_mod, launch
    from orchestrator.config import load_config
    from orchestrator.yaml_edit import set_draft_length

    ks = parse_int_list(k, option="--k", minimum=0)
    if max(ks, default=0) > MAX_DRAFT_LENGTH:
        raise UserError(
            f"--k {max(ks)}: draft lengths above {MAX_DRAFT_LENGTH} are never useful (acceptance decays geometrically)",
            hint="sweep e.g. --k 0,1,2,3,4,6,8",
        )
    seed_list = parse_seeds(seeds)
    if n_predict < 1:
        raise UserError(f"--n-predict must be >= 1 (tokens), got {n_predict}")
    if reps < 1:
        raise UserError(f"--reps must be >= 1, got {reps}")
    if temperature < 0:
        raise UserError(f"--temperature must be >= 0, got {temperature}")
    prompt_list = select_prompts(prompts, prompts_file)
    cfg = load_config(config)
    model_cfg = pick_model(cfg, model)
    bcfg = _bench_config(cfg, model_cfg)
    info = build.locate()
    gpu_list, gpu_source = gpus_mod.detect_gpus()
    specs = [s for s in launch.plan_launch(bcfg, gpus=gpu_list, build=info, check_ports=False) if s.model == model_cfg.name]
    if not specs:
        raise UserError(f"the launch plan has no instance for {model_cfg.name!r}")
    base = min(specs, key=lambda s: s.replica)

    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    # piped output (a log, CI) gets a width that fits the whole table instead of 80 columns
    stdout = Console() if sys.stdout.isatty() else Console(width=160)
    started = datetime.now(timezone.utc)
    with Progress(
        TextColumn("[bold]{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
    ) as progress:
        progress.add_task("starting", total=None)
        sweep = Sweep(
            config=bcfg, model=model_cfg, base=base, ks=ks, prompts=prompt_list, n_predict=n_predict,
            reps=reps, seeds=seed_list, temperature=temperature, log_dir=out / "logs",
            manifest_patched=has_patch(info.manifest), progress=progress,
        )
        run = asyncio.run(sweep.run())
        progress.update(progress.task_ids[0], description="done")

    summaries = bench_stats.summarize(run.results)
    overall = bench_stats.overall_domain(summaries)
    recommended: dict[str, int] = {}
    bands: dict[str, float] = {}
    for domain in sorted({s.domain for s in summaries}):
        recommended[domain], bands[domain] = bench_stats.recommend(summaries, domain)
    best = recommended[overall]
    band = bands[overall]
    analysis = bench_report.analysis_lines(summaries, losing_band=band, domain=overall)
    noisy = bench_stats.noise_warning(summaries, overall)
    if noisy:
        run.warnings.append(noisy)
    title = f"{model_cfg.name}: draft-length sweep ({run.mode}, {len(prompt_list)} prompts x {reps} reps x {len(seed_list)} seeds, n_predict {n_predict})"
    rec_line = (
        f"recommended K = {best} (best median decode tok/s over all prompts; K values within {band:.0%} "
        "of the best count as tied and the smallest tied K wins)"
    )
    if best == 0:
        rec_line += "; speculation does not pay off here"

    payload = {
        "model": model_cfg.name,
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": {
            "k": ks, "prompts": sorted({p.domain for p in prompt_list}), "n_prompts": len(prompt_list),
            "n_predict": n_predict, "reps": reps, "seeds": seed_list, "temperature": temperature,
            "mode": run.mode, "instances_together": run.together, "config": str(cfg.path or config),
        },
        "manifest": manifest(build=info, gpus=gpu_list, gpu_source=gpu_source, spec=base),
        "recommended_k": best,
        "recommended_k_by_domain": recommended,
        "tie_band": band,
        "analysis": analysis,
        "analysis_by_domain": {
            d: bench_report.analysis_lines(summaries, losing_band=bands[d], domain=d) for d in sorted(recommended)
        },
        "warnings": run.warnings,
        "summary": [dataclasses.asdict(s) for s in summaries],
        "requests": [dict(dataclasses.asdict(r), tokens_per_step=r.tokens_per_step) for r in run.results],
        "instances": run.instances,
    }
    bench_report.write_json(out / "results.json", payload)
    bench_report.write_csv(out / "summary.csv", summaries)
    bench_report.write_csv(out / "requests.csv", run.results)
    bench_report.write_plot(out / "sweep.png", summaries, title=f"{model_cfg.name} ({run.mode})")

    stdout.print(bench_report.render_table(summaries, recommended, title=title))
    stdout.print("[bold]analysis[/bold] (a = per-token acceptance; step cost in baseline decode steps):")
    for line in analysis:
        stdout.print("  " + line, markup=False, highlight=False, soft_wrap=True)
    for w in run.warnings:
        stdout.print("warning: " + w, style="yellow", markup=False, highlight=False, soft_wrap=True)
    stdout.print(rec_line, style="bold", markup=False, highlight=False, soft_wrap=True)
    stdout.print(f"results: {out}/results.json, summary.csv, requests.csv, sweep.png", markup=False, highlight=False)

    if apply:
        if cfg.path is None:
            raise UserError("--apply needs a models.yaml file")
        diff = set_draft_length(Path(cfg.path), model_cfg.name, best)
        if diff:
            stdout.print(f"applied K={best} to {cfg.path}:", markup=False, highlight=False)
            stdout.out(diff, highlight=False)
        else:
            stdout.print(f"{cfg.path} already has K={best}; nothing to change", markup=False, highlight=False)
    return 0

