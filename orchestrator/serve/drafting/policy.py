"""The per-request draft length K: online statistics and the choice, as functions on values.

For each model the proxy keeps a ``PolicyState``: per (request class, K), decayed sums of what
answers' ``timings`` said (steps, tokens, drafted, accepted, decode ms); per (depth bucket, K)
the same sums for the cost of a step. ``observe`` adds one answer; ``choose`` picks K for the
next request of a class. The expected decode speed of K in a class is what the class measured
at K (tokens over decode time, decayed sums) once an answer timed it: a step's cost depends on the content too (a
rejected draft makes a hybrid model restore its recurrent state and decode again), so nothing
predicts it better. Before that, the model

    tokens per step (class, K) / step time (depth, K)

* tokens per step: measured for (class, K) once ``min_drafted`` tokens were drafted there;
  otherwise from the class's per-token acceptance ``a`` (fitted to what any K drafted, drafts
  accepted as a prefix) as ``(1 - a^(K+1)) / (1 - a)``;
* step time: the mean step time measured at that K and depth (all classes: a step's cost depends
  on the model and the depth, not on the content) once ``min_cost_samples`` answers timed it;
  otherwise ``StepCost``: the plain step measured at K = 0, and for K > 0 a line fitted to the
  drafting K that were timed (slope ``prior_draft_cost`` plain steps per draft token while only
  one was). Two pieces, not one line, because drafting at all has a fixed cost per step (the
  draft pass): on a CPU, K = 1 costs far more than a line through K = 0 and K = 3 says.

K = 0 is chosen unless the best K beats it by ``margin``, and does so by more than ``sureness``
(2) standard errors of each figure (the spread of the class's answers' tok/s at that K, or
``prior_cv`` of a modelled figure): drafting that does not pay, or that a loaded machine cannot
tell from noise, is turned off, and a class never costs more than noise below K = 0 once it has
been seen.

Exploration is cheap by design: a class never seen drafts once at the largest K (its acceptance
is unknown; that answer measures it at every draft position, and the step time of the longest
draft, so the shorter K are interpolated, never extrapolated). While the K expected best is
"unsure" (it wins on its figure but not by more than the noise, where a K = 0 never timed at this
depth counts as a modelled figure too), a drafting K that beats K = 0 on one answer of its own is
tried again at once (``confirm``: one answer can mislead both ways; on the test bed one Cyrillic
answer at K = 3 ran anywhere from 26 to 59 tok/s, and a Latin one measured 65 where its mean is
75), and the K expected best every ``explore_every``-th request: only its own answers can make it
sure, never its neighbour's. The plain step is measured by the requests that run at K = 0
anyway, never by a probe (one at K = 0 cost content that drafts well a third of a request).
Otherwise every ``explore_every``-th request tries a neighbour of the best
K, but only when that neighbour is expected within ``explore_gap`` of the best (a clearly losing
arm, such as drafting on content the head always gets wrong, is re-tried only every
``refresh_every``-th request).

Pure: imports nothing of the package but ``orchestrator.errors``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

TWO_ANSWERS = 1.5  # an arm's decayed weight once two answers fed it (1 + decay; one alone stays at 1 or below)


@dataclass(frozen=True)
class Params:
    """The policy's knobs. ``ks``: the draft lengths it may choose (0 = off), ascending."""

    ks: tuple[int, ...]
    margin: float = 0.03
    decay: float = 0.9  # weight of the past at each new observation of the same arm
    min_drafted: float = 8.0  # drafted tokens before a (class, K) measurement replaces the model
    min_cost_samples: float = 1.0  # answers timed at a (class or depth, K) before their figures replace the model
    prior_draft_cost: float = 0.25  # a drafted token's cost in steps, until two K were timed
    prior_cv: float = 0.3  # how far one answer's tok/s may be off (a loaded machine), relative
    sureness: float = 2.0  # standard errors by which drafting must beat K = 0
    explore_every: int = 16  # a trial costs at most explore_gap / explore_every (~1%) when the model is right
    explore_gap: float = 0.15
    refresh_every: int = 64


@dataclass(frozen=True)
class Observation:
    """What one answer's ``timings`` say, for a request served at draft length ``k``."""

    k: int
    tokens: int  # predicted_n
    ms: float  # predicted_ms (decode time, prompt processing excluded)
    drafted: int  # draft_n
    accepted: int  # draft_n_accepted

    @property
    def steps(self) -> int:
        """Target-model decode steps: each emitted one token plus the draft tokens it accepted."""
        return max(1, self.tokens - self.accepted)


def observation(k: int, timings: Mapping[str, Any]) -> Observation | None:
    """The ``Observation`` in an answer's ``timings``, or None when it has too little to learn
    from (no decoded tokens, no decode time)."""
    try:
        tokens = int(timings.get("predicted_n") or 0)
        ms = float(timings.get("predicted_ms") or 0.0)
        drafted = int(timings.get("draft_n") or 0)
        accepted = int(timings.get("draft_n_accepted") or 0)
    except (TypeError, ValueError):
        return None
    if tokens < 2 or ms <= 0 or accepted > drafted or accepted >= tokens:
        return None
    return Observation(k=k, tokens=tokens, ms=ms, drafted=drafted, accepted=accepted)


@dataclass(frozen=True)
class Sums:
    """Decayed sums over the observations of one arm; ``weight`` counts them (decayed)."""

    weight: float = 0.0
    steps: float = 0.0
    tokens: float = 0.0
    drafted: float = 0.0
    accepted: float = 0.0
    ms: float = 0.0
    rate: float = 0.0  # per-answer decode tok/s, summed (their spread says how sure the mean is)
    rate_sq: float = 0.0

    def add(self, o: Observation, decay: float) -> Sums:
        r = 1000.0 * o.tokens / o.ms
        return Sums(
            weight=self.weight * decay + 1.0,
            steps=self.steps * decay + o.steps,
            tokens=self.tokens * decay + o.tokens,
            drafted=self.drafted * decay + o.drafted,
            accepted=self.accepted * decay + o.accepted,
            ms=self.ms * decay + o.ms,
            rate=self.rate * decay + r,
            rate_sq=self.rate_sq * decay + r * r,
        )

    def spread(self, prior_cv: float) -> float:
        """Standard error of the mean per-answer tok/s (``prior_cv`` of it from one answer)."""
        mean = self.rate / self.weight if self.weight else 0.0
        if self.weight < TWO_ANSWERS:
            return prior_cv * mean
        var = max(0.0, self.rate_sq / self.weight - mean * mean)
        return float(max(var / self.weight, (0.05 * mean) ** 2 / self.weight) ** 0.5)

    @property
    def step_ms(self) -> float:
        return self.ms / self.steps if self.steps else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 1.0


@dataclass(frozen=True)
class State:
    """One model's statistics: per (class key, K) and per (depth, K); requests seen per class."""

    arms: Mapping[tuple[str, int], Sums] = field(default_factory=dict)
    cost: Mapping[tuple[str, int], Sums] = field(default_factory=dict)
    seen: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Choice:
    """The K for one request, why (``reason``), and the expected decode tok/s per K behind it."""

    k: int
    reason: str  # probe | best | no-gain | unsure | confirm | explore | refresh | client | off
    expected: Mapping[int, float] = field(default_factory=dict)


def observe(state: State, cls: str, depth: str, o: Observation, params: Params) -> State:
    """``state`` with one answer of class ``cls`` at depth bucket ``depth`` added."""
    arms = dict(state.arms)
    arms[(cls, o.k)] = arms.get((cls, o.k), Sums()).add(o, params.decay)
    cost = dict(state.cost)
    cost[(depth, o.k)] = cost.get((depth, o.k), Sums()).add(o, params.decay)
    return replace(state, arms=arms, cost=cost)


def counted(state: State, cls: str) -> State:
    """``state`` with one more request of ``cls`` seen (the exploration schedule's clock)."""
    return replace(state, seen={**state.seen, cls: state.seen.get(cls, 0) + 1})


def draft_rate(a: float, k: int) -> float:
    """Accepted / drafted at draft length ``k`` when each draft token is right with probability
    ``a`` and a draft is accepted up to its first wrong token."""
    if k <= 0:
        return 0.0
    return sum(a**i for i in range(1, k + 1)) / k


def fit_acceptance(samples: list[tuple[int, float, float]]) -> float:
    """The per-token acceptance ``a`` that best explains ``(k, drafted, accepted)`` samples
    (drafted-weighted squared error of ``draft_rate``; a grid of 1/200 steps)."""
    total = sum(d for _, d, _ in samples)
    if total <= 0:
        return 0.0

    def err(a: float) -> float:
        return sum(d * (draft_rate(a, k) - acc / d) ** 2 for k, d, acc in samples if d > 0)

    return min((i / 200 for i in range(201)), key=err)


def tokens_per_step(state: State, cls: str, k: int, params: Params) -> float | None:
    """Expected tokens per step of class ``cls`` at ``k``; None when nothing was drafted yet."""
    if k == 0:
        return 1.0
    arm = state.arms.get((cls, k))
    if arm is not None and arm.drafted >= params.min_drafted:
        return arm.tokens_per_step
    samples = [(kk, s.drafted, s.accepted) for (c, kk), s in state.arms.items() if c == cls and kk > 0]
    if sum(d for _, d, _ in samples) < params.min_drafted:
        return None
    a = fit_acceptance(samples)
    return sum(a**i for i in range(k + 1))


@dataclass(frozen=True)
class StepCost:
    """Step time in ms at a depth: ``base`` at K = 0, ``draft + slope * K`` at K > 0.

    Two pieces, because drafting at all has a fixed cost per step (the draft pass, a bigger
    verification batch): on a CPU a K = 1 step costs 1.8x a plain step while each further draft
    token adds 0.2x, so a line through K = 0 and K = 3 would say K = 1 is cheap."""

    base: float
    draft: float
    slope: float

    def at(self, k: int) -> float:
        return self.base if k <= 0 else self.draft + self.slope * k


def _timed(state: State, depth: str) -> dict[int, Sums]:
    """Step-time sums per K at ``depth``; all depths pooled when this one has no timing yet."""
    points = {k: s for (d, k), s in state.cost.items() if d == depth and s.steps > 0}
    if points:
        return points
    pooled: dict[int, Sums] = {}
    for (_, k), s in state.cost.items():
        if s.steps > 0:
            base = pooled.get(k, Sums())
            pooled[k] = Sums(base.weight + s.weight, base.steps + s.steps, ms=base.ms + s.ms)
    return pooled


def step_cost(state: State, depth: str, params: Params) -> StepCost | None:
    """The ``StepCost`` at ``depth`` from what was timed there (pooled over depths before that);
    None before any answer was timed. K = 0 is its own measurement; the K > 0 line is fitted to
    the K > 0 that were timed, with slope ``prior_draft_cost`` plain steps per draft token while
    only one was; what is missing is filled from the prior ``(1 + prior_draft_cost * K)`` plain
    steps per step."""
    points = _timed(state, depth)
    if not points:
        return None
    drafting = [(k, s) for k, s in points.items() if k > 0]
    prior = params.prior_draft_cost
    if 0 in points:
        base = points[0].step_ms
    else:  # only drafting was timed: a plain step from the prior
        k, s = max(drafting, key=lambda p: p[1].weight)
        base = s.step_ms / (1.0 + prior * k)
    if not drafting:
        return StepCost(base, base, prior * base)
    if len(drafting) == 1:
        k, s = drafting[0]
        return StepCost(base, max(s.step_ms - prior * base * k, 1e-6), prior * base)
    w = sum(s.weight for _, s in drafting)
    mk = sum(s.weight * k for k, s in drafting) / w
    mt = sum(s.weight * s.step_ms for _, s in drafting) / w
    var = sum(s.weight * (k - mk) ** 2 for k, s in drafting)
    slope = max(0.0, sum(s.weight * (k - mk) * (s.step_ms - mt) for k, s in drafting) / var)
    return StepCost(base, max(mt - slope * mk, 1e-6), slope)


def expected_speeds(state: State, cls: str, depth: str, params: Params) -> dict[int, float] | None:
    """Expected decode tok/s of each K in ``params.ks`` for class ``cls``: what the class measured
    at that K (tokens over decode time) once ``min_cost_samples`` answers timed it, else the model
    (tokens per step over the step time at ``depth``); None while the class's acceptance or the
    step time is unknown."""
    cost = step_cost(state, depth, params)
    if cost is None:
        return None
    out: dict[int, float] = {}
    for k in params.ks:
        arm = state.arms.get((cls, k))
        if arm is not None and arm.weight >= params.min_cost_samples and arm.ms > 0:
            out[k] = 1000.0 * arm.tokens / arm.ms
            continue
        tps = tokens_per_step(state, cls, k, params)
        if tps is None:
            return None
        timed = state.cost.get((depth, k))
        step = timed.step_ms if timed and timed.weight >= params.min_cost_samples else cost.at(k)
        out[k] = 1000.0 * tps / step
    return out


def _bound(state: State, cls: str, depth: str, k: int, speed: float, params: Params, side: float) -> float:
    """``speed`` plus ``side`` standard errors (``side`` < 0: minus) of the class's answers at
    ``k`` once two answers give a spread; with fewer, one error only (``prior_cv`` of the figure:
    a trial that its next answers will confirm or not); nothing for a modelled K = 0 whose step
    was timed at ``depth`` (by any class: a plain step's cost does not depend on the content)."""
    answers = _answers(state, cls, k)
    if answers:  # one answer: one error (``spread`` is ``prior_cv`` of it), a trial to confirm
        errors = side if answers == 2 else max(-1.0, min(1.0, side))
        return speed + errors * state.arms[(cls, k)].spread(params.prior_cv)
    if k == 0 and (depth, 0) in state.cost:
        return speed
    return speed * (1.0 + max(-1.0, min(1.0, side)) * params.prior_cv)


def _answers(state: State, cls: str, k: int) -> int:
    """How many answers of class ``cls`` timed ``k``: 0, 1, or 2 (two or more)."""
    arm = state.arms.get((cls, k))
    if arm is None or arm.ms <= 0:
        return 0
    return 1 if arm.weight < TWO_ANSWERS else 2


def choose(state: State, cls: str, depth: str, params: Params) -> Choice:
    """The K for the next request of ``cls`` (call ``counted`` after it, ``observe`` on its answer)."""
    drafting = [k for k in params.ks if k > 0]
    if not drafting:
        return Choice(0, "off")
    speeds = expected_speeds(state, cls, depth, params)
    if speeds is None:  # the longest draft: acceptance at every position and the cost of the most
        return Choice(drafting[-1], "probe")  # drafting, so shorter K are modelled, never extrapolated
    best = candidate = max(speeds, key=lambda k: (speeds[k], -k))
    reason = "best"
    if best > 0 and speeds[best] < speeds.get(0, 0.0) * (1.0 + params.margin):
        best, reason = 0, "no-gain"
    elif best > 0 and _bound(state, cls, depth, best, speeds[best], params, -params.sureness) < _bound(
        state, cls, depth, 0, speeds[0], params, params.sureness
    ) * (1.0 + params.margin):
        best, reason = 0, "unsure"  # drafting must beat K = 0 by more than the noise of both figures
    n = state.seen.get(cls, 0) + 1
    if n % params.refresh_every == 0:
        return Choice(drafting[0] if best == 0 else 0, "refresh", speeds)
    if reason == "unsure":  # a promising K needs answers of its own, not its neighbour's
        once = [k for k in drafting if _answers(state, cls, k) == 1 and speeds[k] > speeds[0] * (1 + params.margin)]
        if once:  # one answer can mislead both ways: a second one, at once
            return Choice(max(once, key=lambda k: speeds[k]), "confirm", speeds)
        if n % params.explore_every == 0:
            return Choice(candidate, "confirm", speeds)
    if n % params.explore_every == 0:
        i = params.ks.index(best)
        side = (n // params.explore_every) % 2
        near = [params.ks[j] for j in (i + 1, i - 1) if 0 <= j < len(params.ks)]
        near = near[side:] + near[:side]
        for k in near:
            if speeds[k] >= speeds[best] * (1.0 - params.explore_gap):
                return Choice(k, "explore", speeds)
    return Choice(best, reason, speeds)
