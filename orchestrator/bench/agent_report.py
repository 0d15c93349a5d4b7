"""The figures of ``orchestrator bench agent``: per turn, per scenario, and before against after.

Pure (no I/O). A turn's new tokens are its prompt minus the previous prompt of the same session, at least 0 (a
session's first turn, or its first after a failed one, has none; a prompt shorter than the one
before, as when the stock template drops earlier reasoning, has 0); its processed tokens are the
prompt less the cached ones; it is within budget when it processed at most its new tokens + 64
(:data:`SLACK`: llama-server resumes from its checkpoint a few tokens before the previous prompt's
end). A scenario's summary adds them up: turns within budget (of those with new tokens), processed
against new tokens over those turns, processed tokens over all turns, p50 and max TTFT, and the
longest silence of any turn.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.bench.agent_stream import Answer

SLACK = 64


@dataclass
class Turn:
    step: int
    session: str
    status: int
    prompt: int | None
    cached: int | None
    processed: int | None
    new: int | None
    ttft: float | None
    silence: float | None
    ok: bool | None
    error: str = ""


def turns(answers: Sequence[tuple[int, str, Answer]]) -> list[Turn]:
    """``(step, session, answer)`` in the order sent -> one :class:`Turn` each."""
    previous: dict[str, int | None] = {}
    out = []
    for step, session, a in answers:
        counted = a.status == 200 and not a.error and a.total is not None and a.cached is not None
        if counted and a.total is not None and a.cached is not None:
            before = previous.get(session)
            new = max(0, a.total - before) if before is not None else None
            processed: int | None = a.total - a.cached
            ok = None if new is None else processed is not None and processed <= new + SLACK
        else:
            new, processed, ok = None, None, None
        previous[session] = a.total if counted else None
        out.append(Turn(step, session, a.status, a.total, a.cached, processed, new, a.ttft, a.silence, ok, a.error))
    return out


@dataclass
class Summary:
    turns: int
    errors: int
    within: int  # turns with new tokens that processed at most new + SLACK
    counted: int  # turns with new tokens
    processed_later: int  # processed tokens over the turns with new tokens
    new_later: int
    processed_all: int
    ttft_p50: float | None
    ttft_max: float | None
    silence_max: float | None

    @property
    def per_new(self) -> float | None:
        """Processed tokens per new token over the turns that have new tokens."""
        return self.processed_later / self.new_later if self.new_later else None


def summarize(rows: Sequence[Turn]) -> Summary:
    later = [r for r in rows if r.new is not None]
    ttfts = [r.ttft for r in rows if r.ttft is not None]
    silences = [r.silence for r in rows if r.silence is not None]
    return Summary(
        turns=len(rows),
        errors=sum(1 for r in rows if r.status != 200 or r.error),
        within=sum(1 for r in later if r.ok),
        counted=len(later),
        processed_later=sum(r.processed or 0 for r in later),
        new_later=sum(r.new or 0 for r in later),
        processed_all=sum(r.processed or 0 for r in rows),
        ttft_p50=statistics.median(ttfts) if ttfts else None,
        ttft_max=max(ttfts, default=None),
        silence_max=max(silences, default=None),
    )


def _num(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else f"{value:.{digits}f}"


def turn_table(rows: Sequence[Turn]) -> list[str]:
    """The per-turn lines of one scenario on one side."""
    head = f"{'step':>4} {'session':<8} {'HTTP':>4} {'prompt':>7} {'new':>6} {'cached':>7} {'processed':>9}"
    lines = [head + f" {'TTFT s':>7} {'silence s':>9}  <= new+64"]
    for r in rows:
        if r.prompt is None or r.error:
            lines.append(f"{r.step:>4} {r.session:<8} {r.status:>4}  {r.error[:110]}")
            continue
        ok = "-" if r.ok is None else ("yes" if r.ok else "NO")
        lines.append(
            f"{r.step:>4} {r.session:<8} {r.status:>4} {r.prompt:>7} {_num(r.new):>6} {_num(r.cached):>7} "
            f"{_num(r.processed):>9} {_num(r.ttft):>7} {_num(r.silence):>9}  {ok}"
        )
    return lines


def summary_line(s: Summary) -> str:
    return (
        f"within new+64: {s.within}/{s.counted}; processed/new {_num(s.processed_later)}/{_num(s.new_later)}"
        f" ({_num(s.per_new)}x); processed, all turns: {_num(s.processed_all)}; TTFT p50 {_num(s.ttft_p50)} s,"
        f" max {_num(s.ttft_max)} s; longest silence {_num(s.silence_max)} s; errors {s.errors}"
    )


def _ratio(first: float | int | None, other: float | int | None) -> str:
    if first is None or other is None or first == 0:
        return ""
    return f" ({other / first:.1f}x)"


def _cell(values: Sequence[float | int | None], digits: int = 2, ratio: bool = True) -> str:
    """``after → before (before/after)``: the first side, then each other side with its ratio to it."""
    parts = [_num(values[0], digits)]
    for v in values[1:]:
        parts.append(_num(v, digits) + (_ratio(values[0], v) if ratio else ""))
    return " → ".join(parts)


# the side-by-side table's figures, in its columns' order
FIGURES = ("per_new", "processed_all", "ttft_p50", "ttft_max", "silence_max")


def side_by_side(sides: Sequence[str], table: dict[str, dict[str, Summary]]) -> list[str]:
    """A markdown table: one row per scenario, each cell the sides' values in order (ratios to the first)."""
    order = " → ".join(sides)
    head = [
        f"| scenario ({order}) | turns ≤ new+64 | processed / new | processed, all turns | TTFT p50 s | TTFT max s"
        " | longest silence s | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines = list(head)
    for name, by_side in table.items():
        got = [by_side.get(side) for side in sides]
        within = " → ".join(f"{s.within}/{s.counted}" if s else "-" for s in got)
        cells = [_cell([getattr(s, key) if s else None for s in got]) for key in FIGURES]
        errors = " → ".join(str(s.errors) if s else "-" for s in got)
        lines.append(f"| {name} | {within} | {' | '.join(cells)} | {errors} |")
    return lines
