"""The drafting watch of one instance: is speculation drafting, is acceptance high enough.

``SpecWatch`` owns the speculation statistics (``speculation``, ``drafted``, ``accepted``, the
rolling window, decode tok/s) and turns what the proxy and the log report into warnings or a
relaunch request:

- ``record_timings``: ``speculation`` becomes ``active`` at the first drafted token, or
  ``inactive`` (with a warning) after ``draft_check_after`` generations that drafted nothing;
  rolling acceptance below ``speculative.acceptance_floor`` warns, and with
  ``spec_fallback: relaunch_without_spec`` asks for a relaunch without speculation.
- ``record_spec_batch_failure``: ``spec_batch_failures`` consecutive speculative-batch failures
  ask for a relaunch without speculation.

The relaunch itself is a request to the instance's lifecycle loop, which relaunches without the
speculative flags and then calls ``fallback_applied`` (state DEGRADED).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.supervise.states import SupervisorPolicy

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig

Speculation = Literal["off", "unknown", "active", "inactive"]


class SpecWatch:
    """Speculation statistics of one instance.

    Args:
        speculative: whether the instance was launched with a speculative type.
        model_cfg: the model's config (``speculative.acceptance_floor``, ``spec_fallback``), if any.
        policy: thresholds (``draft_check_after``, ``acceptance_window``...).
        warnings: the instance's warnings by key; this watch adds and removes its own keys.
        notify: called when readers should look again (a warning or ``speculation`` changed).
        request_relaunch: asks the lifecycle loop for a relaunch without speculation.
    """

    def __init__(
        self,
        *,
        speculative: bool,
        model_cfg: ModelConfig | None,
        policy: SupervisorPolicy,
        warnings: dict[str, str],
        notify: Callable[[], None],
        request_relaunch: Callable[[], None],
    ) -> None:
        self.speculation: Speculation = "unknown" if speculative else "off"
        self.decode_tps: float | None = None  # tok/s of the last response
        self.drafted = 0  # draft tokens since launch
        self.accepted = 0  # accepted draft tokens since launch
        self._model_cfg = model_cfg
        self._policy = policy
        self._warnings = warnings
        self._notify = notify
        self._request_relaunch = request_relaunch
        self._generations = 0
        self._window: collections.deque[tuple[int, int]] = collections.deque()  # (drafted, accepted)
        self._spec_batch_streak = 0

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

    def record_timings(self, timings: dict[str, Any]) -> None:
        """Account one response's llama-server ``timings``.

        Args:
            timings: the ``timings`` object of a completion (``predicted_n``,
                ``predicted_per_second`` in tok/s, and once anything was drafted ``draft_n`` and
                ``draft_n_accepted`` in tokens; see ``server-task.cpp``).

        Effects: decode tok/s for status; the drafting check: on a speculative instance,
        ``speculation`` becomes ``active`` at the first ``draft_n > 0`` and ``inactive`` (with a
        warning) when ``draft_check_after`` generations drafted nothing; the rolling acceptance
        watch (see ``_check_acceptance``). A successful response ends a speculative-batch
        failure streak.
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
        if drafted > 0:
            self._drafted(drafted, int(timings.get("draft_n_accepted") or 0))
        elif self.speculation == "unknown" and self._generations >= self._policy.draft_check_after:
            self.speculation = "inactive"
            self._warnings["spec-inactive"] = (
                f"speculation inactive: {self._generations} generations drafted nothing (timings.draft_n = 0); "
                "check that the GGUF has a NextN/MTP head (orchestrator inspect) or set speculative.type: none"
            )
            self._notify()

    def record_spec_batch_failure(self, text: str) -> None:
        """Account llama-server's "failed to process speculative batch" (``text``: the line).

        ``spec_batch_failures`` consecutive failures (no successful response in between) request a
        relaunch without speculation (state DEGRADED).
        """
        self._spec_batch_streak += 1
        if self._spec_batch_streak >= self._policy.spec_batch_failures and self.speculation != "off":
            self._warnings["spec-batch"] = (
                f"{self._spec_batch_streak} consecutive speculative-batch failures "
                f"({text.strip()[:200]}); relaunching without speculation"
            )
            self._request_relaunch()

    def fallback_applied(self) -> None:
        """The instance was relaunched without speculation: nothing is drafted any more."""
        self.speculation = "off"
        self._window.clear()
        self._warnings["fallback"] = "relaunched without speculation (spec_fallback)"

    def _drafted(self, drafted: int, accepted: int) -> None:
        if self.speculation != "active":
            self.speculation = "active"
            self._warnings.pop("spec-inactive", None)
            self._notify()
        self.drafted += drafted
        self.accepted += accepted
        self._window.append((drafted, accepted))
        while len(self._window) > 1 and sum(d for d, _ in self._window) - self._window[0][0] >= (
            self._policy.acceptance_window
        ):
            self._window.popleft()
        self._check_acceptance()

    def _check_acceptance(self) -> None:
        """Below ``speculative.acceptance_floor`` over at least ``acceptance_min_drafted`` drafted
        tokens: a warning, and with ``spec_fallback: relaunch_without_spec`` a relaunch request."""
        floor = self._model_cfg.speculative.acceptance_floor if self._model_cfg else 0.0
        rate, drafted = self.rolling_acceptance
        if rate is None or drafted < self._policy.acceptance_min_drafted:
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
            self._request_relaunch()
