"""The run of a bench sweep: launching and warming up the bench instances, the request loop
over the interleaved schedule, retries after a crash, and the sanity checks on the results.
The steps are described in :mod:`orchestrator.bench.sweep`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from orchestrator.bench.plan import Task, Variant, bench_spec, schedule
from orchestrator.bench.prompts import Prompt
from orchestrator.bench.requests import N_MAX_FIELD, Completion, complete, reported_n_max, request_body
from orchestrator.bench.summary import RequestResult
from orchestrator.errors import UserError
from orchestrator.host.energy import EnergyMeter
from orchestrator.launch.spec import InstanceSpec, without_speculation
from orchestrator.supervise.status import status_row
from orchestrator.supervise.supervisor import SERVING, TERMINAL, Instance, ProcessState, Supervisor

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ModelConfig

WARMUP_PROMPT = "Say hello."
WARMUP_TOKENS = 64  # enough decode steps to page in the weights and settle the caches


class SweepProgress(Protocol):
    """Where a sweep reports what it is doing (the command line shows it as a progress bar)."""

    def status(self, text: str) -> None:
        """What the sweep is doing now (loading, warming up, which K and prompt)."""

    def total(self, requests: int) -> None:
        """The number of measured requests the sweep will send."""

    def advance(self) -> None:
        """One measured request is done."""


@dataclass
class SweepRun:
    """Everything a finished sweep hands to the report."""

    results: list[RequestResult]
    mode: str  # "per-request" or "relaunch"
    together: bool
    instances: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False  # Ctrl-C: the results are those measured before it


class Sweep:
    """Runs the instances and requests of one sweep (the steps are in :mod:`orchestrator.bench.sweep`)."""

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
        progress: SweepProgress | None = None,
        energy: EnergyMeter | None = None,
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
        self.energy = energy  # the GPUs' energy counter (NVML): joules per request, None on a CPU
        self.together = not base.gpus  # CPU: instances share the mmapped GGUF, keep all up
        self.warnings: list[str] = []
        self._running: dict[str, tuple[Supervisor, Instance]] = {}
        self._seen: dict[str, dict[str, Any]] = {}
        self._templated: dict[int, str] = {}
        self._warmed: dict[str, float | None] = {}  # instance name -> ready_at of the warmed-up launch
        self._client: httpx.AsyncClient | None = None

    # ---- instances

    async def _start(self, variants: Sequence[Variant]) -> None:
        todo = [v for v in variants if v.name not in self._running]
        if not todo:
            return
        if not self.together:
            await self._stop_all()
        sup = Supervisor([v.spec for v in todo], self.config, log_dir=self.log_dir)
        for v, inst in zip(todo, sup.instances, strict=True):
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
        for v, inst in zip(todo, sup.instances, strict=True):
            await self._warm_up(v, inst)

    async def _ensure_warm(self, v: Variant, inst: Instance) -> None:
        """Warm up again when the supervisor relaunched the instance (a crash) since the last warm-up."""
        if self._warmed.get(v.name) != inst.ready_at:
            self.warnings.append(
                f"{inst.name} was relaunched during the sweep (restarts: {inst.restarts}); see {inst.log_path}"
            )
            await self._warm_up(v, inst)

    async def _stop_all(self) -> None:
        sups = {id(s): s for s, _ in self._running.values()}
        for name, (_, inst) in self._running.items():
            self._seen[name] = status_row(inst)
        self._running.clear()
        grace = float(self.config.server.timeouts.shutdown_grace)
        await asyncio.gather(*(s.stop(grace) for s in sups.values()))

    def _instance(self, v: Variant) -> Instance:
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
        body = request_body(
            WARMUP_PROMPT,
            k=k,
            per_request=v.per_request,
            n_min=v.spec.n_min,
            n_predict=min(WARMUP_TOKENS, self.n_predict),
            temperature=0.0,
            seed=0,
        )
        await self._send(inst, body)

    async def _probe_patch(self, v: Variant, inst: Instance) -> bool:
        """Whether ``inst`` honours a per-request ``speculative.n_max`` (reports it back)."""
        # an unpatched server reports no speculative.n_max at all; the patched one reports the
        # effective (clamped) value, which for a K <= the launch n_max is K itself
        probe_k = min(k for k in v.ks if k > 0)
        body = request_body(
            WARMUP_PROMPT, k=probe_k, per_request=True, n_min=v.spec.n_min, n_predict=2, temperature=0.0, seed=0
        )
        comp = await self._send(inst, body)
        return reported_n_max(comp.settings) == probe_k

    async def _send(self, inst: Instance, body: dict[str, Any]) -> Completion:
        assert self._client is not None
        if inst.base_url is None:
            raise UserError(f"{inst.name} has no address yet")
        inst.in_flight += 1
        try:
            try:
                comp = await complete(self._client, inst.base_url, body, inst.lock.auth)
            except httpx.TransportError as err:
                # a crash mid-request: the supervisor restarts the child; retry once when it serves
                self.warnings.append(f"{inst.name}: request failed ({type(err).__name__}); retried after a restart")
                await self._wait_relaunched(inst)
                assert inst.base_url is not None
                try:
                    comp = await complete(self._client, inst.base_url, body, inst.lock.auth)
                except httpx.TransportError as again:
                    tail = " | ".join(inst.log_tail(5))
                    raise UserError(
                        f"{inst.name}: request failed twice ({again!r}); log: {tail}", hint=f"see {inst.log_path}"
                    ) from None
        finally:
            inst.in_flight -= 1
        if comp.timings:
            inst.record_timings(comp.timings)
        return comp

    async def _wait_relaunched(self, inst: Instance) -> None:
        """After a failed request: wait for the supervisor to notice and relaunch, then to serve."""
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
            self.progress.status(text)

    # ---- prompts

    async def _templated_prompt(self, inst: Instance, index: int) -> str:
        """The chat-templated text of prompt ``index`` (via llama-server's ``/apply-template``)."""
        if index in self._templated:
            return self._templated[index]
        assert self._client is not None and inst.base_url is not None
        body: dict[str, Any] = {"messages": [{"role": "user", "content": self.prompts[index].prompt}]}
        if self.model.thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": self.model.thinking}
        resp = await self._client.post(f"{inst.base_url}/apply-template", json=body, auth=inst.lock.auth)
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
            off = without_speculation(self.base, port=0)
            out.append(Variant(bench_spec(off, suffix="k0", n_max=None), (0,)))
        return out

    async def run(self) -> SweepRun:
        """Run the whole sweep; always stops every instance it started."""
        async with self.running():
            return await self.measure()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The sweep's client for its lifetime, and every instance it started stopped at the end:
        measures inside it (one per temperature, ``bench sampling``) share the instances."""
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
            timeout=httpx.Timeout(
                connect=timeouts.connect, read=timeouts.first_byte, write=timeouts.connect, pool=None
            ),
        )
        try:
            yield
        finally:
            await self._stop_all()
            await self._client.aclose()

    async def measure(self) -> SweepRun:
        """Every task of the schedule at ``self.temperature``, on the instances already running
        (started here when not): inside :meth:`running`."""
        variants, mode = await self._decide_mode(self._variants())
        tasks = schedule(
            variants, n_prompts=len(self.prompts), reps=self.reps, seeds=self.seeds, together=self.together
        )
        if self.progress is not None:
            self.progress.total(len(tasks))
        if self.together:
            await self._start(variants)
        results: list[RequestResult] = []
        interrupted = False
        try:
            for task in tasks:
                results.append(await self._measure(task, variants[task.variant]))
                if self.progress is not None:
                    self.progress.advance()
        except asyncio.CancelledError:  # Ctrl-C (asyncio.run cancels this task): keep what was measured
            current = asyncio.current_task()
            if current is None or len({r.k for r in results}) < len(self.ks):
                raise  # not every K measured yet: nothing to compare
            current.uncancel()
            interrupted = True
            self.warnings.append(
                f"interrupted (Ctrl-C) after {len(results)} of {len(tasks)} requests: the figures are of those only"
            )
        self._check(results, mode)
        for name, (_, inst) in self._running.items():
            self._seen[name] = status_row(inst)
        seen = [f"{name}: {w}" for name, row in self._seen.items() for w in row.get("warnings") or []]
        return SweepRun(
            results=results,
            mode=mode,
            together=self.together,
            instances=list(self._seen.values()),
            warnings=[*self.warnings, *seen],  # a second measure in the same running() repeats none
            interrupted=interrupted,
        )

    async def _decide_mode(self, variants: list[Variant]) -> tuple[list[Variant], str]:
        """Start the speculative variant and probe it (step 2): K per request on a patched
        binary, else one instance per K. Returns the variants to run and the mode's name."""
        if not variants or variants[0].ks == (0,):
            return variants, "baseline only"
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
            return variants, "per-request"
        k_max = max(spec_v.ks)
        spec_v.ks = (k_max,)
        extra = [Variant(bench_spec(self.base, suffix=f"k{k}", n_max=k), (k,)) for k in self.ks if 0 < k < k_max]
        return [spec_v, *variants[1:], *extra], "relaunch"

    async def _measure(self, task: Task, v: Variant) -> RequestResult:
        """Send the measured request ``task`` to the instance of ``v`` (started and warm first)."""
        await self._start([v])
        inst = self._instance(v)
        await self._ensure_warm(v, inst)
        prompt = self.prompts[task.prompt_index]
        self._status(f"K={task.k} {prompt.domain} rep {task.rep + 1}/{self.reps}")
        text = await self._templated_prompt(inst, task.prompt_index)
        body = request_body(
            text,
            k=task.k,
            per_request=v.per_request,
            n_min=v.spec.n_min,
            n_predict=self.n_predict,
            temperature=self.temperature,
            seed=task.seed,
        )
        before = self.energy.joules() if self.energy else None
        comp = await self._send(inst, body)
        result = self._result(task, prompt, inst, comp)
        if self.energy is None or before is None:
            return result
        return dataclasses.replace(result, energy_j=self.energy.joules() - before)

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
