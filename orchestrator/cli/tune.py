"""``orchestrator tune`` on the terminal: check the options, run the tune under a progress bar, print
the table with spreads and ratios, recommend, and write the winners on request.

The measurement is :mod:`orchestrator.bench.tune`; this module only draws.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from orchestrator.bench import sweep, tune
from orchestrator.bench.args import parse_depths, parse_int_list
from orchestrator.cli.bench import _progress_bar
from orchestrator.config.yaml_edit import set_launch_settings
from orchestrator.errors import UserError
from orchestrator.launch.fit import N_UBATCH
from orchestrator.native.capabilities import probe_capabilities

DEFAULT_UBATCHES = "512,1024,2048"


def run_tune(
    model: str | None,
    *,
    config: Path,
    ubatch: str,
    depths: str,
    rounds: int,
    n_predict: int,
    apply: bool,
    force: bool = False,
) -> int:
    """Run ``orchestrator tune``; 0 on success.

    Raises:
        UserError: bad options, config, missing build, a model that does not fit (without
            ``force``), an instance that fails to load, a request error.
    """
    ubatches = parse_int_list(
        ubatch, option="--ubatch", minimum=1, example=DEFAULT_UBATCHES,
        meaning="physical batch sizes: prompt tokens per prefill step, at least 1",
    )  # fmt: skip
    depth_list = [d for d in parse_depths(depths) if d > 0]
    if not depth_list:
        raise UserError("--depths needs at least one depth above 0 (e.g. 8k,32k)")
    if rounds < 2:
        raise UserError("--rounds must be at least 2 (a median over one round has no spread)")
    ctx = max(depth_list) + n_predict + 64
    target = sweep.plan_target(config, model, force=force, ctx=ctx, deepest=max(depth_list))
    settings = tune.settings_for(target, ubatches, probe_capabilities(target.build).flags)
    with tempfile.TemporaryDirectory(prefix="orchestrator-tune-") as logs, _progress_bar() as progress:
        runner = tune.Tune(
            target, settings, depths=depth_list, rounds=rounds, n_predict=n_predict, log_dir=Path(logs),
            progress=progress,
        )  # fmt: skip
        samples = tune.run_tune(runner)
    rows = tune.table(samples)
    stdout = Console() if sys.stdout.isatty() else Console(width=160)
    stdout.print(_render(rows, f"tune {target.model.name}: {rounds} rounds, tokens/s (median, IQR)"))
    best = tune.recommend(rows)
    if not target.base.gpus:
        stdout.print("note: on a CPU these rates test the pipeline; the settings matter on a GPU", markup=False)
    stdout.print(_recommendation(best), style="bold", markup=False, highlight=False, soft_wrap=True)
    if apply and target.config.path is not None:
        diff = set_launch_settings(
            Path(target.config.path),
            target.model.name,
            ubatch_size=best["ubatch_size"],
            backend_sampling=best["backend_sampling"],
        )
        said = f"applied to {target.config.path}" if diff else f"{target.config.path} already says so"
        stdout.print(said + (":" if diff else ""), markup=False, highlight=False)
        if diff:
            stdout.print(diff, markup=False, highlight=False)
    return 0


def _render(rows: list[tune.Row], title: str) -> Table:
    t = Table(title=title)
    for name, justify in (("setting", "left"), ("measure", "left"), ("tok/s", "right"), ("IQR", "right")):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    t.add_column("vs default", justify="right")
    t.add_column("n", justify="right")
    for r in sorted(rows, key=lambda r: (r.what, r.setting.name)):
        ratio = f"{r.ratio:.3f}x" if r.ratio is not None else "-"
        t.add_row(r.setting.name, r.what, f"{r.median:.1f}", f"{r.q1:.1f}-{r.q3:.1f}", ratio, str(r.n))
    return t


def _recommendation(best: dict[str, object]) -> str:
    ub = best["ubatch_size"]
    parts = [f"ubatch_size: {ub}" if ub is not None else f"ubatch_size: default ({N_UBATCH})"]
    bs = best["backend_sampling"]
    if not best.get("backend_sampling_measured"):
        parts.append("speculative.backend_sampling: not measured (no drafting, or the binary lacks its flags)")
    elif bs is None:
        parts.append("speculative.backend_sampling: as it is (on and off within the margin)")
    else:
        parts.append(f"speculative.backend_sampling: {'true' if bs else 'false'}")
    margin = f"(a setting must beat the default by more than {tune.MARGIN:.0%}, its IQR above the default's)"
    return "recommended: " + ", ".join(parts) + " " + margin
