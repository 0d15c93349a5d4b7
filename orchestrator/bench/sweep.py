"""``orchestrator bench``: sweep the draft length K against a no-speculation baseline.

How a sweep runs (the same launch path as ``orchestrator up``, without the proxy):

1. models.yaml is loaded, one model is picked, and ``launch.plan.plan_launch`` plans its replica 0.
   From that plan come the bench instances, each a supervised llama-server
   (``supervise.supervisor.Supervisor``) on an OS-picked port:

   - ``<model>-bench-spec``: speculation on, launched with ``--spec-draft-n-max max(K)``;
   - ``<model>-bench-k0``: the same server without speculation (``launch.spec.without_speculation``);
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
   applying. Statistics and their formulas are in :mod:`orchestrator.bench.stats`, their
   aggregation over the sweep in :mod:`orchestrator.bench.summary`; files and analysis lines in
   :mod:`orchestrator.bench.report`.

Where the code is: this module has the steps of the command (options checked, model picked,
sweep run, results analysed and written, ``--apply``), which :mod:`orchestrator.cli.bench` calls
and prints; :mod:`orchestrator.bench.args` parses the K and seed lists,
:mod:`orchestrator.bench.prompts` the prompt sets; :mod:`orchestrator.bench.plan` builds the
variants and the request order (steps 1 and 4), :mod:`orchestrator.bench.runner` runs them
(steps 2-4), :mod:`orchestrator.bench.requests` sends one request (step 5), and
:mod:`orchestrator.bench.manifest` records what the results depend on.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.bench import report
from orchestrator.bench.args import MAX_DRAFT_LENGTH, parse_depths, parse_int_list, parse_seeds
from orchestrator.bench.manifest import manifest
from orchestrator.bench.plan import bench_config, check_depths, fit_config, has_patch
from orchestrator.bench.prompts import Prompt, at_depths, select_prompts
from orchestrator.bench.runner import Sweep, SweepProgress, SweepRun
from orchestrator.bench.summary import Summary, disagreements, noise_warning, overall_domain, recommend, summarize
from orchestrator.config.load import load_config
from orchestrator.config.schema import Config, ModelConfig
from orchestrator.config.yaml_edit import set_draft_length
from orchestrator.errors import UserError
from orchestrator.host import disk
from orchestrator.host import gpus as gpus_mod
from orchestrator.host.energy import EnergyMeter
from orchestrator.launch import plan as launch
from orchestrator.launch.spec import InstanceSpec
from orchestrator.native import build
from orchestrator.native.build import BuildInfo
from orchestrator.native.capabilities import probe_capabilities


@dataclass(frozen=True)
class BenchOptions:
    """The checked options of a sweep: draft lengths ``ks`` (tokens, 0 = baseline), sampling
    ``seeds``, the prompts, ``n_predict`` tokens per request, ``reps`` repetitions, ``temperature``."""

    ks: list[int]
    seeds: list[int]
    prompts: list[Prompt]
    n_predict: int
    reps: int
    temperature: float
    depths: tuple[int, ...] = (0,)  # prompt depths in tokens (agent context before the question)

    @property
    def ctx_needed(self) -> int:
        """Context (tokens) one request may need: the deepest prompt, its question, the answer."""
        return max(self.depths) + self.n_predict + 512 if max(self.depths) else 0


def check_options(
    *,
    k: str,
    seeds: str,
    prompts: str,
    prompts_file: Path | None,
    n_predict: int,
    reps: int,
    temperature: float,
    depths: str = "0",
) -> BenchOptions:
    """Parse and check the command's options (the meaning of each is on :func:`orchestrator.cli.bench.run_bench`).

    Raises:
        UserError: a bad K or seed list, a draft length above :data:`MAX_DRAFT_LENGTH`, a
            non-positive ``n_predict`` or ``reps``, a negative temperature, a bad prompts file.
    """
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
    depth_list = parse_depths(depths)
    prompt_list = at_depths(select_prompts(prompts, prompts_file), depth_list)
    return BenchOptions(ks, seed_list, prompt_list, n_predict, reps, temperature, tuple(depth_list))


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


@dataclass(frozen=True)
class BenchTarget:
    """What a sweep runs on: the loaded ``config`` (and the file it came from), the ``model``,
    the narrowed ``bench_config``, the native ``build``, the GPUs, and ``base``, the launch spec
    of the model's first replica that every bench instance is derived from."""

    config_file: Path
    config: Config
    model: ModelConfig
    bench_config: Config
    build: BuildInfo
    gpus: list[Any]
    gpu_source: str
    base: InstanceSpec


def plan_target(
    config_file: Path,
    model: str | None,
    *,
    n_max: int | None = None,
    force: bool = False,
    ctx: int = 0,
    deepest: int = 0,
) -> BenchTarget:
    """Load models.yaml, pick the model, locate the build, detect GPUs and plan the model's launch.

    The fit check counts the largest draft length the sweep launches (``n_max``, tokens: more
    recurrent-state snapshots and draft logits than the model's own ``speculative.n_max``), and
    its messages name the model's own models.yaml line; ``force`` launches anyway. ``ctx``: tokens
    of context a request needs (deep prompts: ``deepest``, the deepest ``--depths``, plus the
    question and answer); the bench's server gets at least that per slot, within the model's
    trained context (``plan.check_depths``).

    Raises:
        UserError: a config error, no such model, no native build, no planned instance, or a
            model that does not fit (unless ``force``).
    """
    cfg = load_config(config_file)
    model_cfg = pick_model(cfg, model)
    check_depths(cfg, model_cfg, ctx, deepest)
    bcfg = bench_config(cfg, model_cfg, ctx)
    info = build.locate()
    gpu_list, gpu_source = gpus_mod.detect_gpus()
    capabilities = probe_capabilities(info)
    planned = launch.plan_launch(
        fit_config(cfg, model_cfg, n_max, ctx),
        gpus=gpu_list,
        build=info,
        capabilities=capabilities,
        check_ports=False,
        force=force,
        gpu_source=gpu_source,
        only=model_cfg.name,
    )
    specs = [s for s in planned if s.model == model_cfg.name]
    if not specs:
        raise UserError(f"the launch plan has no instance for {model_cfg.name!r}")
    base = min(specs, key=lambda s: s.replica)
    return BenchTarget(config_file, cfg, model_cfg, bcfg, info, gpu_list, gpu_source, base)


def run_sweep(target: BenchTarget, options: BenchOptions, *, log_dir: Path, progress: SweepProgress | None) -> SweepRun:
    """Run the whole sweep (steps 1-5 of the module docstring); every instance is stopped at the end.

    Raises:
        UserError: an instance that fails to load or falls back, a request that fails twice.
    """
    sweep = Sweep(
        config=target.bench_config,
        model=target.model,
        base=target.base,
        ks=options.ks,
        prompts=options.prompts,
        n_predict=options.n_predict,
        reps=options.reps,
        seeds=options.seeds,
        temperature=options.temperature,
        log_dir=log_dir,
        manifest_patched=has_patch(target.build.manifest),
        progress=progress,
        energy=EnergyMeter.open(target.base.gpus),
    )
    return asyncio.run(sweep.run())


@dataclass(frozen=True)
class Outcome:
    """The analysis of a finished sweep: per-(K, domain) ``summaries``, the recommended K and
    tie band per domain, the ``overall`` domain whose recommendation is the sweep's, and the
    analysis lines of that domain."""

    summaries: list[Summary]
    recommended: dict[str, int]
    bands: dict[str, float]
    overall: str
    analysis: list[str]

    @property
    def best(self) -> int:
        """The recommended draft length of the whole sweep (tokens; 0 = no speculation)."""
        return self.recommended[self.overall]

    @property
    def band(self) -> float:
        """The relative tie band behind :attr:`best`."""
        return self.bands[self.overall]


def analyse(run: SweepRun) -> Outcome:
    """Summarize the results, recommend K per domain, write the analysis lines; a noise warning
    is appended to ``run.warnings`` when the decode rates scatter too much to trust."""
    summaries = summarize(run.results)
    overall = overall_domain(summaries)
    recommended: dict[str, int] = {}
    bands: dict[str, float] = {}
    for domain in sorted({s.domain for s in summaries}):
        recommended[domain], bands[domain] = recommend(summaries, domain)
    analysis = report.analysis_lines(summaries, losing_band=bands[overall], domain=overall)
    noisy = noise_warning(summaries, overall)
    if noisy:
        run.warnings.append(noisy)
    run.warnings.extend(disagreements(summaries))
    return Outcome(summaries, recommended, bands, overall, analysis)


def title(target: BenchTarget, options: BenchOptions, run: SweepRun) -> str:
    """The heading of the results table."""
    return (
        f"{target.model.name}: draft-length sweep ({run.mode}, {len(options.prompts)} prompts x {options.reps} reps"
        f" x {len(options.seeds)} seeds, n_predict {options.n_predict})"
    )


def recommendation_line(outcome: Outcome) -> str:
    """The closing sentence: which K, and how the choice was made."""
    line = (
        f"recommended K = {outcome.best} (best median decode tok/s over all prompts; K values within "
        f"{outcome.band:.0%} of the best count as tied and the smallest tied K wins)"
    )
    if outcome.best == 0:
        line += "; speculation does not pay off here"
    return line


def results_payload(
    target: BenchTarget, options: BenchOptions, run: SweepRun, outcome: Outcome, *, started: datetime
) -> dict[str, Any]:
    """The content of ``results.json``: settings, manifest, recommendation, analysis, every request."""
    return {
        "model": target.model.name,
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {
            "k": options.ks,
            "prompts": sorted({p.domain for p in options.prompts}),
            "n_prompts": len(options.prompts),
            "n_predict": options.n_predict,
            "depths": list(options.depths),
            "reps": options.reps,
            "seeds": options.seeds,
            "temperature": options.temperature,
            "mode": run.mode,
            "interrupted": run.interrupted,
            "instances_together": run.together,
            "config": str(target.config.path or target.config_file),
        },
        "manifest": manifest(build=target.build, gpus=target.gpus, gpu_source=target.gpu_source, spec=target.base),
        "recommended_k": outcome.best,
        "recommended_k_by_domain": outcome.recommended,
        "tie_band": outcome.band,
        "analysis": outcome.analysis,
        "analysis_by_domain": {
            d: report.analysis_lines(outcome.summaries, losing_band=outcome.bands[d], domain=d)
            for d in sorted(outcome.recommended)
        },
        "warnings": run.warnings,
        "summary": [dataclasses.asdict(s) for s in outcome.summaries],
        "requests": [dict(dataclasses.asdict(r), tokens_per_step=r.tokens_per_step) for r in run.results],
        "instances": run.instances,
    }


def write_results(out: Path, payload: dict[str, Any], run: SweepRun, outcome: Outcome, *, plot_title: str) -> list[str]:
    """Write ``results.json``, ``summary.csv``, ``requests.csv`` and ``sweep.png`` into ``out``.

    Returns the files that could not be written (a full, read-only or forbidden folder:
    ``orchestrator.host.disk``): the sweep's minutes of work are still printed.
    """
    writes = {
        "results.json": lambda path: report.write_json(path, payload),
        "summary.csv": lambda path: report.write_csv(path, outcome.summaries),
        "requests.csv": lambda path: report.write_csv(path, run.results),
        "sweep.png": lambda path: report.write_plot(path, outcome.summaries, title=plot_title),
    }
    failed = []
    for name, write in writes.items():
        path = out / name
        if disk.attempt(f"bench {name}", path, lambda w=write, p=path: w(p) or True) is None:  # type: ignore[misc]
            failed.append(name)
    return failed


def apply_draft_length(target: BenchTarget, k: int) -> str:
    """Write draft length ``k`` into the model's entry in models.yaml; returns the diff ("" if unchanged).

    Raises:
        UserError: the config did not come from a file.
    """
    if target.config.path is None:
        raise UserError("--apply needs a models.yaml file")
    return set_draft_length(Path(target.config.path), target.model.name, k)
