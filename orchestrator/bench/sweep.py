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
   applying. Statistics and their formulas are in :mod:`orchestrator.bench.stats`; files and
   analysis lines in :mod:`orchestrator.bench.report`.

Where the code is: this module has the command (options checked, model picked, sweep run,
results written, ``--apply``); :mod:`orchestrator.bench.args` parses the K and seed lists,
:mod:`orchestrator.bench.prompts` the prompt sets; :mod:`orchestrator.bench.plan` builds the
variants and the request order (steps 1 and 4), :mod:`orchestrator.bench.runner` runs them
(steps 2-4), :mod:`orchestrator.bench.requests` sends one request (step 5), and
:mod:`orchestrator.bench.manifest` records what the results depend on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.bench.args import MAX_DRAFT_LENGTH, parse_int_list, parse_seeds
from orchestrator.bench.manifest import manifest
from orchestrator.bench.plan import has_patch
from orchestrator.bench.prompts import select_prompts
from orchestrator.bench.runner import Sweep
from orchestrator.errors import UserError

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ModelConfig


def pick_model(config: Config, name: str | None) -> ModelConfig:
    """The model to bench: ``name`` (or alias), or the only model of the config.

    Raises:
        UserError: no such model, or several models and no name.
    """
    names = ", ".join(m.name for m in config.models)
    if name is None:
        if len(config.models) == 1:
            return config.models[0]
        raise UserError(
            f"{config.path or 'models.yaml'} has {len(config.models)} models; name one",
            hint=f"orchestrator bench MODEL  (models: {names})",
        )
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
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from orchestrator.bench import report as bench_report
    from orchestrator.bench import stats as bench_stats
    from orchestrator.config.schema import load_config
    from orchestrator.config.yaml_edit import set_draft_length
    from orchestrator.host import gpus as gpus_mod
    from orchestrator.launch import plan as launch
    from orchestrator.native import build

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
    specs = [
        s for s in launch.plan_launch(bcfg, gpus=gpu_list, build=info, check_ports=False) if s.model == model_cfg.name
    ]
    if not specs:
        raise UserError(f"the launch plan has no instance for {model_cfg.name!r}")
    base = min(specs, key=lambda s: s.replica)

    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    # piped output (a log, CI) gets a width that fits the whole table instead of 80 columns
    stdout = Console() if sys.stdout.isatty() else Console(width=160)
    started = datetime.now(UTC)
    with Progress(
        TextColumn("[bold]{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as progress:
        progress.add_task("starting", total=None)
        sweep = Sweep(
            config=bcfg,
            model=model_cfg,
            base=base,
            ks=ks,
            prompts=prompt_list,
            n_predict=n_predict,
            reps=reps,
            seeds=seed_list,
            temperature=temperature,
            log_dir=out / "logs",
            manifest_patched=has_patch(info.manifest),
            progress=progress,
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
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {
            "k": ks,
            "prompts": sorted({p.domain for p in prompt_list}),
            "n_prompts": len(prompt_list),
            "n_predict": n_predict,
            "reps": reps,
            "seeds": seed_list,
            "temperature": temperature,
            "mode": run.mode,
            "instances_together": run.together,
            "config": str(cfg.path or config),
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
