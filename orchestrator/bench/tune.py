"""``orchestrator tune``: the launch settings that decide an agent's speed, measured on this machine.

What an agent user feels is prefill of a long prompt and decode with MTP. Two launch settings move
them and cost only memory: the physical batch (``-ub``, prompt tokens per prefill step; llama-server
defaults to 512, agent recipes on an RTX 5090 use 2048) and sampling the draft on the GPU
(``--spec-draft-backend-sampling``, +7-13% MTP decode on 5090s in public runs; on by default at the
pin, so it is measured on against off, each flag passed). How a tune runs:

1. the model's launch is planned as ``orchestrator bench`` plans it (the same fit check, with the
   context the deepest prompt needs), and one instance per setting is derived from it: each
   ``ubatch`` candidate with backend sampling as models.yaml leaves it, and llama-server's default
   ``-ub`` with ``--spec-draft-backend-sampling`` and with ``--no-spec-draft-backend-sampling``
   (only where the model drafts and the binary has both flags);
2. in every round, in a rotating order (drift hits every setting alike), each setting gets one
   ``/completion`` per depth with ``n_predict: 1`` and ``cache_prompt: false`` (its
   ``timings.prompt_per_second`` is the prefill rate at that depth) and one short generation (its
   ``predicted_per_second`` is the decode rate, drafting on); the backend-sampling settings get
   only the generation (they change decode, not prefill);
3. each figure is the median over rounds with its interquartile spread, and a ratio against the
   default setting from the same run; a setting is recommended only when it beats the default by
   more than ``MARGIN`` and its spread lies above the default's (else the default stays: a setting
   that wins by noise costs memory).

On a CPU the instances stay up together (the GGUF is mmapped and shared); on GPUs one runs at a
time. ``--apply`` writes the winners into models.yaml (``config.yaml_edit.set_launch_settings``,
comments kept). The draft length K is ``orchestrator bench``'s; this module leaves it as it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from orchestrator.bench.prompts import context_text, depth_label
from orchestrator.bench.requests import complete
from orchestrator.bench.runner import SweepProgress
from orchestrator.bench.stats import median, quartiles
from orchestrator.bench.sweep import BenchTarget
from orchestrator.errors import UserError
from orchestrator.launch.fit import N_UBATCH
from orchestrator.launch.spec import InstanceSpec, with_port
from orchestrator.supervise.supervisor import ProcessState, Supervisor

MARGIN = 0.03
LLAMA_BATCH = 2048  # llama-server's default -b  # a setting must beat the default by more than this to be recommended
DECODE_PROMPT = "Write a short Python function that returns the sum of a list, with a docstring."
BACKEND_SAMPLING_FLAGS = ("--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling")


@dataclass(frozen=True)
class Setting:
    """One launch variant: ``ubatch`` (None: llama-server's default) and the draft's backend sampling
    (True: ``--spec-draft-backend-sampling``, False: ``--no-...``, None: as the model's launch has it)."""

    ubatch: int | None
    backend_sampling: bool | None = None

    @property
    def name(self) -> str:
        bs = {None: "", True: " bs-on", False: " bs-off"}[self.backend_sampling]
        return f"ub{self.ubatch or N_UBATCH}{bs}"

    @property
    def slug(self) -> str:
        """``name`` as an instance-name suffix (no spaces)."""
        return self.name.replace(" ", "-")

    def spec(self, base: InstanceSpec) -> InstanceSpec:
        """``base`` launched with this setting, on an OS-picked port, under its own name."""
        speculation = base.server.speculation
        if speculation is not None and self.backend_sampling is not None:
            speculation = dataclasses.replace(speculation, backend_sampling=self.backend_sampling)
        server = dataclasses.replace(base.server, ubatch_size=self.ubatch, speculation=speculation)
        moved = with_port(dataclasses.replace(base, server=server), 0)
        return dataclasses.replace(moved, name=f"{base.model}-tune-{self.slug}")


@dataclass(frozen=True)
class Sample:
    """One measurement: ``what`` is ``prefill@<depth>`` or ``decode``; ``tps`` tokens per second."""

    setting: Setting
    round: int
    what: str
    tps: float


def settings_for(target: BenchTarget, ubatches: Sequence[int], flags: frozenset[str]) -> list[Setting]:
    """The settings a tune measures: the default first (the baseline), each other ``ubatch``, and
    backend sampling on and off where it can run (the model drafts, the binary has both flags)."""
    # llama.cpp cuts -ub to -b: a larger candidate would measure the same as -b and could be written
    # into a models.yaml that refuses it; the model's own ubatch_size is measured too
    batch = target.model.batch_size or LLAMA_BATCH
    wanted = {*ubatches, *([target.model.ubatch_size] if target.model.ubatch_size else [])}
    out = [Setting(None)]
    out += [Setting(ub) for ub in sorted(wanted) if ub != N_UBATCH and ub <= batch]
    if target.base.server.speculation is not None and all(f in flags for f in BACKEND_SAMPLING_FLAGS):
        out += [Setting(None, backend_sampling=True), Setting(None, backend_sampling=False)]
    return out


class Tune:
    """Runs the instances and requests of one tune (steps 1-2 of the module docstring)."""

    def __init__(
        self,
        target: BenchTarget,
        settings: Sequence[Setting],
        *,
        depths: Sequence[int],
        rounds: int,
        n_predict: int,
        log_dir: Path,
        progress: SweepProgress | None = None,
        together: bool | None = None,
        deadline: float | None = None,
    ) -> None:
        self.target, self.settings, self.depths = target, list(settings), list(depths)
        self.rounds, self.n_predict, self.log_dir, self.progress = rounds, n_predict, log_dir, progress
        # every setting up at once: on a CPU (the GGUF is mmapped and shared), or where the caller
        # knows the GPU holds them all; else one at a time
        self.together = not target.base.gpus if together is None else together
        self.deadline = deadline  # time.monotonic() after which no new round starts (the GPU check)
        self.samples: list[Sample] = []
        self._prompts = {d: context_text(d, seed=d) for d in self.depths}

    async def run(self) -> list[Sample]:
        """Every round of every setting; every instance is stopped at the end."""
        if self.progress is not None:
            self.progress.total(self.rounds * len(self.settings))
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0)) as client:
            if self.together:
                sup = await self._start(self.settings)
                try:
                    await self._rounds(client, lambda _s: sup)
                finally:
                    await sup.stop(float(self.target.config.server.timeouts.shutdown_grace))
            else:
                await self._rounds_one_at_a_time(client)
        return self.samples

    async def _start(self, settings: Sequence[Setting]) -> Supervisor:
        sup = Supervisor([s.spec(self.target.base) for s in settings], self.target.bench_config, log_dir=self.log_dir)
        self._status(f"loading {', '.join(s.name for s in settings)}")
        await sup.start()
        if not await sup.wait_all_ready(float(self.target.config.server.timeouts.load) * 3):
            bad = [i for i in sup.instances if i.state is not ProcessState.READY]
            await sup.stop(5.0)
            why = "; ".join(f"{i.name}: {i.message or i.state.value}" for i in bad)
            raise UserError(f"a tune instance did not load: {why}", hint=f"see the logs in {self.log_dir}")
        return sup

    def _more(self, rnd: int) -> bool:
        return rnd < self.rounds and (self.deadline is None or time.monotonic() < self.deadline)

    async def _rounds(self, client: httpx.AsyncClient, sup_of: Any) -> None:
        for rnd in range(self.rounds):
            if not self._more(rnd):
                return
            n = len(self.settings)
            for setting in [self.settings[(rnd + j) % n] for j in range(n)]:
                await self._measure(client, sup_of(setting), setting, rnd)

    async def _rounds_one_at_a_time(self, client: httpx.AsyncClient) -> None:
        for rnd in range(self.rounds):
            if not self._more(rnd):
                return
            order = self.settings if rnd % 2 == 0 else list(reversed(self.settings))
            for setting in order:  # snake: consecutive rounds share a load at the turn
                sup = await self._start([setting])
                try:
                    await self._measure(client, sup, setting, rnd)
                finally:
                    await sup.stop(float(self.target.config.server.timeouts.shutdown_grace))

    async def _measure(self, client: httpx.AsyncClient, sup: Supervisor, setting: Setting, rnd: int) -> None:
        inst = next(i for i in sup.instances if i.name.endswith("-" + setting.slug))
        base_url = inst.base_url or ""
        for depth in self.depths if setting.backend_sampling is None else ():
            self._status(f"round {rnd + 1}/{self.rounds}: {setting.name} prefill at {depth_label(depth)}")
            body = {"prompt": self._prompts[depth], "n_predict": 1, "cache_prompt": False, "temperature": 0}
            done = await complete(client, base_url, body, inst.lock.auth)
            self._record(setting, rnd, f"prefill@{depth_label(depth)}", done.timings.get("prompt_per_second"))
        self._status(f"round {rnd + 1}/{self.rounds}: {setting.name} decode")
        body = {"prompt": DECODE_PROMPT, "n_predict": self.n_predict, "cache_prompt": False, "temperature": 0}
        done = await complete(client, base_url, body, inst.lock.auth)
        self._record(setting, rnd, "decode", done.timings.get("predicted_per_second"))
        if self.progress is not None:
            self.progress.advance()

    def _record(self, setting: Setting, rnd: int, what: str, tps: Any) -> None:
        if isinstance(tps, int | float) and tps > 0:
            self.samples.append(Sample(setting, rnd, what, float(tps)))

    def _status(self, text: str) -> None:
        if self.progress is not None:
            self.progress.status(text)


@dataclass(frozen=True)
class Row:
    """One (setting, measurement) of the table: median, quartiles, samples, ratio to the default."""

    setting: Setting
    what: str
    median: float
    q1: float
    q3: float
    n: int
    ratio: float | None


def table(samples: Sequence[Sample]) -> list[Row]:
    """The medians and spreads of ``samples``, each with its ratio to the default setting's."""
    cells: dict[tuple[Setting, str], list[float]] = {}
    for s in samples:
        cells.setdefault((s.setting, s.what), []).append(s.tps)
    base = {what: median(v) for (setting, what), v in cells.items() if setting == Setting(None)}
    rows = []
    for (setting, what), values in cells.items():
        q1, q3 = quartiles(values)
        mid = median(values)
        ratio = mid / base[what] if base.get(what) else None
        rows.append(Row(setting, what, mid, q1, q3, len(values), ratio))
    return rows


def recommend(rows: Sequence[Row]) -> dict[str, Any]:
    """The settings to write: ``ubatch_size`` (the best prefill at the deepest depth) and
    ``backend_sampling`` (decode). A setting wins only when its median beats the default's by more
    than ``MARGIN`` and its interquartile range lies wholly above the default's (noise does not
    win); None keeps llama-server's default. Backend sampling on and off are compared with each
    other by the same rule: ``backend_sampling`` is the winner, None when neither wins (or it was
    not measured), and ``backend_sampling_measured`` says which."""
    base = {r.what: r for r in rows if r.setting == Setting(None)}

    def beats(r: Row, b: Row | None) -> bool:
        return b is not None and b.median > 0 and r.median / b.median > 1 + MARGIN and r.q1 > b.q3

    prefill = [r for r in rows if r.what.startswith("prefill@") and r.setting.backend_sampling is None]
    deepest = max((r.what for r in prefill), key=_depth, default=None)
    best = max((r for r in prefill if r.what == deepest), key=lambda r: r.median, default=None)
    ubatch = best.setting.ubatch if best is not None and beats(best, base.get(best.what)) else None
    bs = {r.setting.backend_sampling: r for r in rows if r.what == "decode" and r.setting.ubatch is None}
    on, off = bs.get(True), bs.get(False)
    winner = True if on and beats(on, off) else False if off and beats(off, on) else None
    return {"ubatch_size": ubatch, "backend_sampling": winner, "backend_sampling_measured": bool(on and off)}


def _depth(what: str) -> float:
    label = what.split("@", 1)[1]
    return float(label[:-1]) * 1024 if label.endswith("K") else float(label)


def run_tune(tune: Tune) -> list[Sample]:
    """Run ``tune`` to the end (its instances are stopped whatever happens)."""
    return asyncio.run(tune.run())
