"""``orchestrator bench`` on the terminal: check the options, run the sweep under a progress bar,
print the table, the analysis and the recommendation, and apply it on request.

The sweep itself (planning, running, analysing, writing the results folder) is
:mod:`orchestrator.bench.sweep`; this module only draws.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console, JustifyMethod
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from orchestrator.bench import sweep
from orchestrator.bench.report import fmt_number
from orchestrator.bench.sampling import Cell
from orchestrator.bench.summary import Summary
from orchestrator.errors import UserError

TABLE_COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("domain", "left"),
    ("K", "right"),
    ("tok/s med", "right"),
    ("IQR", "right"),
    ("speedup", "right"),
    ("TTFT ms", "right"),
    ("accept", "right"),
    ("acc/step", "right"),
    ("tok/step", "right"),
    ("geom", "right"),
    ("step cost", "right"),
    ("J/tok", "right"),
    ("reps", "right"),
)


def run_bench(
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
    force: bool = False,
    depths: str = "0",
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
        force: launch even if the fit check (at the largest K swept) fails.
        depths: comma-separated prompt depths in tokens (``0,8k,32k``): every prompt is also sent
            after that much agent-like context, reported as the domain ``<domain>@<depth>``.

    Returns 0 on success. Raises ``UserError``: bad options, config, missing build, a model
    that does not fit (without ``force``), an instance that fails to load, a request error.
    """
    options = sweep.check_options(
        k=k, seeds=seeds, prompts=prompts, prompts_file=prompts_file, n_predict=n_predict, reps=reps,
        temperature=temperature, depths=depths,
    )  # fmt: skip
    target = sweep.plan_target(
        config, model, n_max=max(options.ks), force=force, ctx=options.ctx_needed, deepest=max(options.depths)
    )
    _make_folder(out)
    started = datetime.now(UTC)
    with _progress_bar() as progress:
        run = sweep.run_sweep(target, options, log_dir=out / "logs", progress=progress)
    outcome = sweep.analyse(run)
    payload = sweep.results_payload(target, options, run, outcome, started=started)
    unsaved = sweep.write_results(out, payload, run, outcome, plot_title=f"{target.model.name} ({run.mode})")
    # piped output (a log, CI) gets a width that fits the whole table instead of 80 columns
    stdout = Console() if sys.stdout.isatty() else Console(width=160)
    if unsaved:  # a full or read-only disk: the numbers are printed below, not saved
        run.warnings.append(f"could not write {', '.join(unsaved)} into {out} (disk full, read-only or forbidden)")
    _print_results(stdout, sweep.title(target, options, run), outcome, run.warnings, out)
    return _finish(stdout, target, outcome, apply=apply, interrupted=run.interrupted)


def _finish(
    stdout: Console, target: sweep.BenchTarget, outcome: sweep.Outcome, *, apply: bool, interrupted: bool
) -> int:
    """Apply the best K when asked; the exit code. 130 (the shell's code for Ctrl-C) for an
    interrupted sweep, which never rewrites models.yaml."""
    if interrupted:
        if apply:
            stdout.print("--apply: not applied, the sweep was interrupted", markup=False, highlight=False)
        return 130
    if apply:
        _apply(stdout, target, outcome.best)
    return 0


def _make_folder(out: Path) -> None:
    """Create the results folder before the sweep (minutes of work must have somewhere to go).

    Raises ``UserError`` naming ``--out`` when it cannot be created."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out: cannot create {out}: {err.strerror}", hint="pass a writable folder") from None


class _RichProgress:
    """The sweep's progress (:class:`orchestrator.bench.runner.SweepProgress`) on a rich progress bar."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task = progress.add_task("starting", total=None)

    def status(self, text: str) -> None:
        self._progress.update(self._task, description=text)

    def total(self, requests: int) -> None:
        self._progress.update(self._task, total=requests, completed=0)

    def advance(self) -> None:
        self._progress.advance(self._task)


@contextmanager
def _progress_bar() -> Iterator[_RichProgress]:
    """A progress bar on stderr that says "done" when the sweep finishes."""
    with Progress(
        TextColumn("[bold]{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as progress:
        bar = _RichProgress(progress)
        yield bar
        bar.status("done")


def _print_results(stdout: Console, title: str, outcome: sweep.Outcome, warnings: list[str], out: Path) -> None:
    stdout.print(render_table(outcome.summaries, outcome.recommended, title=title))
    stdout.print("[bold]analysis[/bold] (a = per-token acceptance; step cost in baseline decode steps):")
    for line in outcome.analysis:
        stdout.print("  " + line, markup=False, highlight=False, soft_wrap=True)
    for w in warnings:
        stdout.print("warning: " + w, style="yellow", markup=False, highlight=False, soft_wrap=True)
    stdout.print(sweep.recommendation_line(outcome), style="bold", markup=False, highlight=False, soft_wrap=True)
    stdout.print(f"results: {out}/results.json, summary.csv, requests.csv, sweep.png", markup=False, highlight=False)


def _apply(stdout: Console, target: sweep.BenchTarget, best: int) -> None:
    diff = sweep.apply_draft_length(target, best)
    if diff:
        stdout.print(f"applied K={best} to {target.config.path}:", markup=False, highlight=False)
        stdout.out(diff, highlight=False)
    else:
        stdout.print(f"{target.config.path} already has K={best}; nothing to change", markup=False, highlight=False)


def render_table(summaries: Sequence[Summary], recommended: dict[str, int], *, title: str) -> Table:
    """A rich table, one row per (domain, K); the recommended K of each domain is marked with *.

    Args:
        recommended: domain -> recommended K.
    """
    t = Table(title=title, title_justify="left")
    for col, justify in TABLE_COLUMNS:
        t.add_column(col, justify=justify)
    last_domain = None
    for s in summaries:
        if last_domain is not None and s.domain != last_domain:
            t.add_section()
        last_domain = s.domain
        mark = "*" if recommended.get(s.domain) == s.k else ""
        t.add_row(
            s.domain,
            f"{s.k}{mark}",
            fmt_number(s.tps_median, ".1f"),
            fmt_number(s.tps_iqr, ".1f"),
            fmt_number(s.speedup),
            fmt_number(s.ttft_median * 1000, ".0f"),
            fmt_number(s.acceptance),
            fmt_number(s.mean_accepted),
            fmt_number(s.tokens_per_step),
            fmt_number(s.geometric),
            fmt_number(s.step_cost),
            fmt_number(s.joules_per_token) if s.joules_per_token is not None else "-",
            str(s.reps),
        )
    return t


def run_sampling(
    model: str | None,
    *,
    config: Path,
    k: int | None,
    temperatures: str,
    prompts: str,
    n_predict: int,
    reps: int,
    seeds: str,
    out: Path,
) -> int:
    """``orchestrator bench sampling``: greedy against probabilistic drafting at each temperature
    (:mod:`orchestrator.bench.sampling`); prints the table and writes ``sampling.json`` into ``out``.

    Raises ``UserError``: bad options, config, missing build, a model without speculation, an
    instance that fails to load.
    """
    from orchestrator.bench import report
    from orchestrator.bench import sampling as bs

    target = sweep.plan_target(config, model)
    options = bs.check_options(
        k=k, temperatures=temperatures, prompts=prompts, n_predict=n_predict, reps=reps, seeds=seeds,
        model_n_max=target.model.speculative.n_max,
    )  # fmt: skip
    _make_folder(out)
    with _progress_bar() as progress:
        cells = bs.run(target, options, log_dir=out / "logs", progress=progress)
    stdout = Console() if sys.stdout.isatty() else Console(width=160)
    stdout.print(sampling_table(cells, title=f"{target.model.name}: draft sampling at K = {options.k}"))
    launch = bs.with_sampling(target.base, "MODE").command_line
    stdout.print(f"launch (MODE: each sampling): {launch}", markup=False, highlight=False, soft_wrap=True)
    report.write_json(out / "sampling.json", bs.payload(target, options, cells))
    stdout.print(f"results: {out}/sampling.json", markup=False, highlight=False)
    return 0


def sampling_table(cells: Sequence[Cell], *, title: str) -> Table:
    """One row per (temperature, mode): acceptance, tokens per step, median decode tok/s."""
    t = Table(title=title, title_justify="left")
    for col in ("temperature", "sampling", "accept", "tok/step", "tok/s med", "drafted", "requests"):
        t.add_column(col, justify="left" if col == "sampling" else "right")
    rows = sorted(cells, key=lambda c: (c.temperature, c.mode))
    for i, c in enumerate(rows):
        if i and c.temperature != rows[i - 1].temperature:
            t.add_section()
        t.add_row(
            f"{c.temperature:g}",
            c.mode,
            fmt_number(c.acceptance),
            fmt_number(c.tokens_per_step),
            fmt_number(c.tps_median, ".1f"),
            str(c.drafted),
            str(c.requests),
        )
    return t
