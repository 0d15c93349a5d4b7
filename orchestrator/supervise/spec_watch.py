"""The drafting watch of one instance: is speculation drafting, is acceptance high enough.

``SpecWatch`` is mixed into ``orchestrator.supervise.instance.Instance``; it owns the speculation fields
(``speculation``, ``drafted``, ``accepted``, the rolling window) and turns what the proxy
reports into warnings or a relaunch request:

- ``record_timings``: ``speculation`` becomes ``active`` at the first drafted token, or
  ``inactive`` (with a warning) after ``draft_check_after`` generations that drafted nothing;
  rolling acceptance below ``speculative.acceptance_floor`` warns, and with
  ``spec_fallback: relaunch_without_spec`` asks for a relaunch without speculation.
- ``record_error("spec_batch", ...)``: ``spec_batch_failures`` consecutive speculative-batch
  failures ask for a relaunch without speculation.

The relaunch itself is a request to the lifecycle loop, which calls ``_apply_spec_fallback``
before the next launch (state DEGRADED).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.supervise.states import SupervisorPolicy

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig
    from orchestrator.launch.plan import InstanceSpec


class SpecWatch:
    """Speculation accounting for ``Instance`` (which sets every attribute below in ``__init__``)."""

    spec: InstanceSpec
    policy: SupervisorPolicy
    speculation: Literal["off", "unknown", "active", "inactive"]
    decode_tps: float | None
    drafted: int
    accepted: int
    _model_cfg: ModelConfig | None
    _warnings: dict[str, str]
    _degraded: bool
    _relaunch_requested: bool
    _generations: int
    _window: collections.deque[tuple[int, int]]
    _spec_batch_streak: int
    _requests: asyncio.Queue[tuple[Any, float]]
    _notify: Callable[[], None]

    @property
    def acceptance(self) -> float | None:
        """Accepted / drafted tokens since launch, or None before anything was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def rolling_acceptance(self) -> tuple[float | None, int]:
        """(acceptance, drafted tokens) over the last ``acceptance_window`` drafted tokens."""
        drafted = sum(d for d, _ in self._window)
        accepted = sum(a for _, a in self._window)
        return (accepted / drafted if drafted else None), drafted

    # ----------------------------------------------------------------- inputs from the proxy / bench

    def record_timings(self, timings: dict[str, Any]) -> None:
        """Account one response's llama-server ``timings``.

        Args:
            timings: the ``timings`` object of a completion (``predicted_n``,
                ``predicted_per_second`` in tok/s, and once anything was drafted ``draft_n`` and
                ``draft_n_accepted`` in tokens; see ``server-task.cpp``).

        Effects: decode tok/s for status; the drafting check (S03): on a speculative instance,
        ``speculation`` becomes ``active`` at the first ``draft_n > 0`` and ``inactive`` (with a
        warning) when ``draft_check_after`` generations drafted nothing; the rolling acceptance
        watch: below ``speculative.acceptance_floor`` over at least ``acceptance_min_drafted``
        drafted tokens gives a warning, and with ``spec_fallback: relaunch_without_spec`` a
        relaunch without speculation (state DEGRADED).
        """
        tps = timings.get("predicted_per_second")
        if isinstance(tps, (int, float)) and tps > 0:
            self.decode_tps = float(tps)
        self._spec_batch_streak = 0
        if self.speculation == "off":
            return
        predicted = timings.get("predicted_n")
        if isinstance(predicted, int) and predicted < 2:
            return  # one token can never be drafted; it proves nothing
        self._generations += 1
        drafted = int(timings.get("draft_n") or 0)
        accepted = int(timings.get("draft_n_accepted") or 0)
        if drafted > 0:
            if self.speculation != "active":
                self.speculation = "active"
                self._warnings.pop("spec-inactive", None)
                self._notify()
            self.drafted += drafted
            self.accepted += accepted
            self._window.append((drafted, accepted))
            while (
                len(self._window) > 1
                and sum(d for d, _ in self._window) - self._window[0][0] >= self.policy.acceptance_window
            ):
                self._window.popleft()
            self._check_acceptance()
        elif self.speculation == "unknown" and self._generations >= self.policy.draft_check_after:
            self.speculation = "inactive"
            self._warnings["spec-inactive"] = (
                f"speculation inactive: {self._generations} generations drafted nothing (timings.draft_n = 0); "
                "check that the GGUF has a NextN/MTP head (orchestrator inspect) or set speculative.type: none"
            )
            self._notify()

    def record_error(self, kind: str, text: str) -> None:
        """Account an error seen by the proxy or in the child's log.

        Args:
            kind: ``"spec_batch"`` for llama-server's "failed to process speculative batch";
                any other kind is kept as the latest warning of that kind.
            text: the error text (one line).

        ``spec_batch_failures`` consecutive speculative-batch failures (no successful response in
        between) request a relaunch without speculation (state DEGRADED).
        """
        if kind != "spec_batch":
            self._warnings[f"error:{kind}"] = f"{kind}: {text.strip()[:300]}"
            self._notify()
            return
        self._spec_batch_streak += 1
        if self._spec_batch_streak >= self.policy.spec_batch_failures and self.speculation != "off":
            self._warnings["spec-batch"] = (
                f"{self._spec_batch_streak} consecutive speculative-batch failures "
                f"({text.strip()[:200]}); relaunching without speculation"
            )
            self._request_relaunch_without_spec()

    def _check_acceptance(self) -> None:
        floor = self._model_cfg.speculative.acceptance_floor if self._model_cfg else 0.0
        rate, drafted = self.rolling_acceptance
        if rate is None or drafted < self.policy.acceptance_min_drafted:
            return
        if rate >= floor:
            self._warnings.pop("acceptance", None)
            return
        fallback = self._model_cfg.speculative.spec_fallback if self._model_cfg else "warn"
        self._warnings["acceptance"] = (
            f"acceptance {rate:.2f} over the last {drafted} drafted tokens is below the floor {floor:.2f}"
            + ("; relaunching without speculation" if fallback == "relaunch_without_spec" else "")
        )
        self._notify()
        if fallback == "relaunch_without_spec":
            self._request_relaunch_without_spec()

    def _request_relaunch_without_spec(self) -> None:
        if self._relaunch_requested:
            return
        self._relaunch_requested = True
        self._requests.put_nowait(("relaunch_without_spec", self.policy.stop_grace))
        self._notify()

    def _apply_spec_fallback(self) -> None:
        from orchestrator.launch.plan import with_argv_overrides

        self.spec = with_argv_overrides(self.spec, spec_off=True)
        self._degraded = True
        self.speculation = "off"
        self._window.clear()
        self._warnings["fallback"] = "relaunched without speculation (spec_fallback)"
