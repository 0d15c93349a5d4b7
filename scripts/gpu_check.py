#!/usr/bin/env python3
"""One prepared command that measures MTP decode speed on this machine's NVIDIA GPU (or its CPU).

Steps (each timed; the run stops cleanly before ``--time-limit`` and reports what it has):
  1. detect the GPU with NVML: name, compute capability, bus width x memory clock = peak bandwidth;
  2. use a carried-in llama-server build after checking it sees the GPU, else build the CUDA
     server for this GPU's architecture only (all cores; ccache when present; a rerun resumes);
  3. generate the Qwen3.6-35B-A3B-shaped echo model once per acceptance rate (sparse files);
  4. start ``orchestrator up`` serving them (one llama-server each, launched with draft length 4);
  5. interleaved rounds: decode tok/s at K = 0 (drafting off) and each K, for each acceptance
     rate, straight to each llama-server and through the orchestrator's endpoint, plus the
     endpoint's adaptive draft-length policy (``speculative.adaptive``: the row "adaptive");
  6. the launch settings ``orchestrator tune`` measures, as rows: prefill tok/s at ``--tune-depth``
     per ``-ub`` (512, 2048) and decode tok/s with the draft's backend sampling on against off
     (``--spec-draft-backend-sampling`` / ``--no-...``, each passed: ``orchestrator.bench.tune``),
     beside the decode bandwidth bound;
  7. vision with MTP: the first model served with a tiny projector of its width (``mmproj``), the MTP
     acceptance rate with and without an image beside the same questions (``orchestrator.bench.vision``);
  8. bytes read per decoded token from the model's tensors, the fraction of the bandwidth bound,
     the recommended K; ``gpu-check.json`` + ``gpu-check.md`` in ``--out``; where the time went.

Usage: scripts/gpu_check.py [--time-limit 540] [--cpu --scale small] [--out DIR] [--bin-dir DIR]
Exit status: 0 when every step ran, 1 when the run was cut short (the report says why), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_check_up import RunningUp, StepFailed, run_bounded  # noqa: E402

from orchestrator.bench import gpu_check as gc  # noqa: E402
from orchestrator.bench import gpu_report  # noqa: E402
from orchestrator.bench.vision import section as vision_section  # noqa: E402
from orchestrator.errors import UserError  # noqa: E402
from orchestrator.models import shaped  # noqa: E402
from orchestrator.models.shapes import SCALES  # noqa: E402
from orchestrator.models.traffic import traffic  # noqa: E402

TEARDOWN_S = 25.0  # kept back at the end: stop the servers, write the reports


class Clock:
    """The run's time limit and the record of where the time went."""

    def __init__(self, limit_s: float) -> None:
        self.t0 = time.monotonic()
        self.deadline = self.t0 + limit_s
        self.steps: list[dict[str, Any]] = []

    def left(self, reserve: float = TEARDOWN_S) -> float:
        """Seconds left before the limit, minus ``reserve``."""
        return self.deadline - reserve - time.monotonic()

    @contextmanager
    def step(self, name: str) -> Any:
        started = time.monotonic()
        record = {"name": name, "seconds": 0.0, "status": "ok"}
        self.steps.append(record)
        print(f"== {name} ({self.left(0):.0f} s left)", flush=True)
        try:
            yield record
        except BaseException as err:
            record["status"] = f"failed: {err or type(err).__name__}".splitlines()[0][:160]
            raise
        finally:
            record["seconds"] = round(time.monotonic() - started, 2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time-limit", type=float, default=540.0, help="seconds for the whole run (default 9 min)")
    p.add_argument("--cpu", action="store_true", help="no GPU: the CPU build (for tests and CPU figures)")
    p.add_argument("--scale", default="full", choices=SCALES, help="model size: full, medium or small")
    p.add_argument("--quant", default="q4_k_m", choices=list(shaped.QUANTS))
    p.add_argument("--q", default="0.1,0.25", help="fractions of wrong drafts, one model each (acceptance 1 - q)")
    p.add_argument("--k", default="1,2,3,4", help="draft lengths to measure beside K = 0")
    p.add_argument("--paths", default="direct,up", help="direct (to llama-server), up (through the endpoint)")
    p.add_argument("--n-predict", type=int, default=None, help="tokens per request (default 128 GPU, 24 CPU)")
    p.add_argument("--max-rounds", type=int, default=12, help="rounds at most; round 0 is a warm-up")
    p.add_argument("--threads", type=int, default=None, help="llama-server threads on CPU (default: all cores)")
    p.add_argument("--ctx", type=int, default=4096, help="context size of each llama-server (tokens)")
    p.add_argument("--out", type=Path, default=None, help="report folder (default results/gpu-check-<time>)")
    p.add_argument("--models-dir", type=Path, default=None, help="where the models go (default: the report folder)")
    p.add_argument("--bin-dir", type=Path, default=None, help="a carried-in build folder holding llama-server")
    p.add_argument("--keep-models", action="store_true", help="leave the generated models on disk")
    p.add_argument(
        "--tune-depth", type=int, default=None, help="prompt tokens for the prefill rows (8192 GPU, 1024 CPU)"
    )
    p.add_argument("--tune-ubatch", default="512,2048", help="-ub values for the prefill rows")
    p.add_argument(
        "--tune-share", type=float, default=0.3, help="fraction of the time left for the launch-settings rows"
    )
    args = p.parse_args(argv)
    try:
        args.qs = [float(x) for x in args.q.split(",") if x.strip()]
        args.ks = sorted({int(x) for x in args.k.split(",") if x.strip()} - {0})
    except ValueError:
        p.error("--q and --k take comma-separated numbers")
    args.path_list = [x for x in args.paths.split(",") if x]
    if not args.path_list or not set(args.path_list) <= {"direct", "up"}:
        p.error("--paths takes direct, up or both")
    if not args.qs or not args.ks or any(not 0 <= q < 1 for q in args.qs) or min(args.ks) < 1:
        p.error("--q needs values in [0, 1) and --k values >= 1")
    args.n_predict = args.n_predict or (24 if args.cpu else 128)
    args.tune_depth = args.tune_depth or (1024 if args.cpu else 8192)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    args.out = (args.out or REPO / "results" / f"gpu-check-{stamp}").resolve()
    args.models_dir = (args.models_dir or args.out).resolve()
    return args


def detect(args: argparse.Namespace, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The GPU (NVML) as a dict, or None on ``--cpu``. Raises ``StepFailed`` when none is found."""
    manifest["load_average"] = [round(x, 2) for x in os.getloadavg()]
    manifest["cpu"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    if args.cpu:
        return None
    from orchestrator.host.gpu_bandwidth import read_gpus

    gpus, why = read_gpus()
    if not gpus:
        raise StepFailed(f"no NVIDIA GPU found through NVML ({why}); use --cpu for a CPU run")
    g = gpus[0]
    print(
        f"   {g.name}, cc {g.compute_capability}, {g.bus_width_bits}-bit @ {g.max_memory_clock_mhz} MHz, "
        f"peak {(g.peak_bandwidth or 0) / 1e9:.0f} GB/s",
        flush=True,
    )
    return g.to_json()


def _server_sees(server: Path, want_cuda: bool) -> bool:
    try:
        out = subprocess.run([str(server), "--list-devices"], capture_output=True, text=True, timeout=90)
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = out.stdout + out.stderr
    return out.returncode == 0 and (not want_cuda or "CUDA0" in text)


def ensure_build(args: argparse.Namespace, gpu: dict[str, Any] | None, clock: Clock, manifest: dict[str, Any]) -> Path:
    """A llama-server bin folder that runs here: the carried-in one if it works, else a build."""
    from orchestrator.native.build import locate

    candidates = [p for p in (args.bin_dir, os.environ.get("ORCHESTRATOR_BIN_DIR")) if p]
    with suppress(UserError):
        candidates.append(locate().bin_dir)
    for cand in candidates:
        server = Path(cand) / "llama-server"
        if server.is_file() and _server_sees(server, want_cuda=gpu is not None):
            manifest["build_source"] = f"carried in / cached: {cand}"
            return Path(cand)
        print(f"   {server} does not run here or sees no GPU; building", flush=True)
    argv = [sys.executable, "-m", "orchestrator.cli.app", "build", "--backend", "cpu" if gpu is None else "cuda"]
    if gpu is not None:
        argv += ["--cuda-arch", str(gpu["compute_capability"]).replace(".", ""), "--jobs", str(os.cpu_count() or 2)]
    run_bounded(
        argv,
        timeout=clock.left(reserve=TEARDOWN_S + 60),
        what="the llama-server build",
        hint="run the same command again: the build tree is kept and the build resumes",
    )
    manifest["build_source"] = "built in this run"
    return locate().bin_dir


def generate(args: argparse.Namespace, manifest: dict[str, Any]) -> dict[float, Path]:
    """One shaped echo model per q; records size and bytes on disk in the manifest."""
    args.models_dir.mkdir(parents=True, exist_ok=True)
    paths, files = {}, []
    for q in args.qs:
        path = args.models_dir / f"{args.scale}-{args.quant}-q{q}.gguf"
        t0 = time.monotonic()
        shaped.write_shaped_model(path, quant=args.quant, q=q, scale=args.scale)
        size, used = shaped.disk_usage(path)
        files.append(
            {
                "path": str(path),
                "q": q,
                "bytes": size,
                "bytes_on_disk": used,
                "seconds": round(time.monotonic() - t0, 1),
            }
        )
        print(f"   {path.name}: {size / 1e9:.2f} GB ({used / 1e9:.2f} GB on disk)", flush=True)
        paths[q] = path
    manifest.update(
        shape="qwen3.6-35b-a3b", scale=args.scale, quant=args.quant, models=files, file_bytes=files[0]["bytes"]
    )
    return paths


def models_yaml(args: argparse.Namespace, models: dict[float, Path], path: Path, mmproj: Path | None = None) -> Path:
    lines = ["server:", "  host: 127.0.0.1", "  port: 0", "  timeouts: {load: 600, shutdown_grace: 10}", "models:"]
    for q, model in models.items():
        lines += [f"  - name: {model_name(q)}", f"    path: {model}", f"    ctx_size: {args.ctx}", "    parallel: 1"]
        lines += [f"    mmproj: {mmproj}"] if mmproj is not None else []
        lines += ["    gpu_layers: all"] if not args.cpu else [f"    threads: {args.threads or os.cpu_count() or 2}"]
        lines += [f"    speculative: {{type: draft-mtp, n_max: {max(args.ks)}, n_min: 1, adaptive: true}}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def model_name(q: float) -> str:
    return f"echo-acc{round(100 * (1 - q))}"


def measure(args: argparse.Namespace, up: RunningUp, qs: list[float], deadline: float) -> list[gc.Sample]:
    endpoints = []
    for q in qs:
        name = model_name(q)
        if "direct" in args.path_list:
            endpoints.append(gc.Endpoint("direct", q, up.instance_url(name), name, up.instance_pid(name)))
        if "up" in args.path_list:
            endpoints.append(gc.Endpoint("up", q, up.endpoint, name, up.instance_pid(name)))

    def done(rnd: int, seconds: float) -> None:
        print(f"   round {rnd} took {seconds:.1f} s ({deadline - time.monotonic():.0f} s left for it)", flush=True)

    return asyncio.run(
        gc.run_rounds(
            endpoints,
            [0, *args.ks, gc.ADAPTIVE],
            n_predict=args.n_predict,
            deadline=deadline,
            max_rounds=args.max_rounds,
            on_round=done,
        )
    )


def measure_launch_settings(
    args: argparse.Namespace, clock: Clock, models: dict[float, Path], gpu: dict[str, Any] | None, notes: list[str]
) -> list[dict[str, Any]]:
    """``orchestrator tune``'s rows on the first model: prefill per ``-ub`` at ``--tune-depth``,
    decode with backend sampling on and off (each flag passed); all settings up at once where memory allows."""
    from orchestrator.bench import sweep, tune
    from orchestrator.native.capabilities import probe_capabilities

    q = next(iter(models))
    config = models_yaml(args, {q: models[q]}, args.out / "models-tune.yaml")
    target = sweep.plan_target(config, model_name(q), ctx=args.tune_depth + args.n_predict + 64)
    ubatches = [int(x) for x in args.tune_ubatch.split(",") if x.strip()]
    settings = tune.settings_for(target, ubatches, probe_capabilities(target.build).flags)
    total = (gpu or {}).get("memory_total")
    together = args.cpu or bool(total and len(settings) * (models[q].stat().st_size + 3 * 2**30) <= total)
    runner = tune.Tune(
        target, settings, depths=[args.tune_depth], rounds=args.max_rounds, n_predict=args.n_predict,
        log_dir=args.out / "tune-logs", together=together, deadline=time.monotonic() + clock.left() - 10,
    )  # fmt: skip
    rows = tune.table(tune.run_tune(runner))
    if len({r.n for r in rows}) and min((r.n for r in rows), default=0) < 2:
        notes.append("launch settings: fewer than two rounds fit in the time limit")
    best = tune.recommend(rows)
    return [{"setting": r.setting.name, "measure": r.what, "median": r.median, "q1": r.q1, "q3": r.q3, "n": r.n,
             "ratio": r.ratio, "recommended": best} for r in rows]  # fmt: skip


def measure_vision(
    args: argparse.Namespace, clock: Clock, models: dict[float, Path], session: Session
) -> dict[str, Any]:
    """The first model with a tiny projector of its width: acceptance with and without an image."""
    from orchestrator.bench import vision
    from orchestrator.models.facts import read_model_facts
    from orchestrator.models.tiny_mmproj import write_tiny_mmproj

    q = next(iter(models))
    width = read_model_facts(models[q]).embedding_length or 0
    projector = write_tiny_mmproj(args.models_dir / f"mmproj-tiny-{width}.gguf", n_embd=width)
    config = models_yaml(args, {q: models[q]}, args.out / "models-vision.yaml", mmproj=projector)
    session.up = RunningUp(config, args.out / "state-vision")
    session.up.start(timeout=clock.left())
    rounds = max(2, min(args.max_rounds or 4, 4))
    return vision.measure(session.up.endpoint, model_name(q), rounds, args.n_predict, n_max=max(args.ks))


def model_groups(args: argparse.Namespace, gpu: dict[str, Any] | None, file_bytes: int) -> list[list[float]]:
    """All acceptance rates served together, or one at a time when the GPU cannot hold every
    model at once (each needs its weights plus about 3 GiB of cache and compute buffers)."""
    total = (gpu or {}).get("memory_total")
    if not total or len(args.qs) * (file_bytes + 3 * 2**30) <= total:
        return [args.qs]
    return [[q] for q in args.qs]


class Session:
    """The orchestrator currently serving (stopped by ``stop``, also from the final step)."""

    def __init__(self) -> None:
        self.up: RunningUp | None = None

    def stop(self) -> None:
        if self.up is not None:
            self.up.stop()
            self.up = None


def serve_and_measure(
    args: argparse.Namespace,
    clock: Clock,
    models: dict[float, Path],
    groups: list[list[float]],
    session: Session,
    reserve: float = 0.0,
) -> list[gc.Sample]:
    """For each group of models: start ``orchestrator up``, measure until its share of the time
    left, stop it (the last group is stopped by the final step)."""
    samples: list[gc.Sample] = []
    for i, group in enumerate(groups):
        label = "" if len(groups) == 1 else f" (acceptance {1 - group[0]:.2f})"
        with clock.step("start orchestrator up" + label):
            config = models_yaml(args, {q: models[q] for q in group}, args.out / f"models-{i}.yaml")
            session.up = RunningUp(config, args.out / f"state-{i}")
            session.up.start(timeout=clock.left())
        with clock.step("measure (interleaved)" + label):
            stop_s = 15.0 * (len(groups) - i - 1)  # later groups' stops
            share = (clock.left() * (1 - reserve) - stop_s) / (len(groups) - i)
            samples += measure(args, session.up, group, time.monotonic() + share)
        if i < len(groups) - 1:
            with clock.step("stop orchestrator up" + label):
                session.stop()
    return samples


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clock = Clock(args.time_limit)
    manifest: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "time_limit_s": args.time_limit,
        "n_predict": args.n_predict,
        "ks": [0, *args.ks],
        "qs": args.qs,
        "orchestrator_commit": _git_commit(),
    }
    notes: list[str] = []
    gpu: dict[str, Any] | None = None
    samples: list[gc.Sample] = []
    tr, models, session = None, {}, Session()
    complete = False
    try:
        with clock.step("detect"):
            gpu = detect(args, manifest)
        with clock.step("build or carried-in build"):
            bin_dir = ensure_build(args, gpu, clock, manifest)
            os.environ["ORCHESTRATOR_BIN_DIR"] = str(bin_dir)
            manifest.update(_build_facts(bin_dir))
        with clock.step("generate models"):
            models = generate(args, manifest)
            tr = traffic(next(iter(models.values())))
        groups = model_groups(args, gpu, manifest["file_bytes"])
        manifest["served_together"] = len(groups) == 1
        samples = serve_and_measure(args, clock, models, groups, session, reserve=args.tune_share)
        decoded = all(len({s.round for s in samples if s.error is None and s.q == g[0]}) >= 2 for g in groups)
        complete = decoded
        with clock.step("stop orchestrator up"):
            session.stop()
        with clock.step("launch settings (interleaved)"):
            manifest["launch_settings"] = measure_launch_settings(args, clock, models, gpu, notes)
        if clock.left() > 60:
            with clock.step("vision with MTP"):
                manifest["vision"] = measure_vision(args, clock, models, session)
                session.stop()
        else:
            complete = False  # complete means every step ran: the decode figures stand, the notes say what is missing
            notes.append("vision with MTP: not measured, the time limit was reached")
        if not decoded:
            notes.append("fewer than two rounds fit in the time limit: no figures past the warm-up")
    except (StepFailed, UserError, OSError) as err:
        complete = False  # a later step failed: what ran before it is reported, but the run is not complete
        notes.append(str(err))
    except KeyboardInterrupt:
        complete = False
        notes.append("interrupted")
    except Exception as err:  # a bug: still stop everything and write the report
        complete = False
        traceback.print_exc()
        notes.append(f"unexpected error: {type(err).__name__}: {err}")
    finally:
        with clock.step("stop and report"):
            session.stop()
            if not args.keep_models:
                for p in [*models.values(), *args.models_dir.glob("mmproj-tiny-*.gguf")]:
                    p.unlink(missing_ok=True)
            _report(args, clock, manifest, notes, gpu, tr, samples, complete)
    return 0 if complete else 1


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _build_facts(bin_dir: Path) -> dict[str, Any]:
    import json

    from orchestrator.native.build import server_version

    mf = bin_dir / "manifest.json"
    data = json.loads(mf.read_text()) if mf.is_file() else {}
    return {
        "server_version": server_version(bin_dir / "llama-server").splitlines()[0],
        "build_key": data.get("key"),
        "build_manifest": data,
    }


def _report(
    args: argparse.Namespace,
    clock: Clock,
    manifest: dict[str, Any],
    notes: list[str],
    gpu: dict[str, Any] | None,
    tr: Any,
    samples: list[gc.Sample],
    complete: bool,
) -> None:
    manifest["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    bandwidth = gpu.get("peak_bandwidth_bytes_per_s") if gpu else None
    rows = gc.summarize(samples, tr, bandwidth)
    errors = [s.error for s in samples if s.error and s.error != gc.CUT]
    if errors:
        notes.append(f"{len(errors)} request(s) failed, first: {errors[0]}")
    if any(s.error == gc.CUT for s in samples):
        notes.append("the time limit cut the last round short (its finished requests count)")
    doc = gpu_report.build_doc(
        complete=complete and not errors,
        notes=notes,
        manifest=manifest,
        gpu=gpu,
        traffic=tr.to_json() if tr else None,
        steps=clock.steps,
        rows=rows,
        recommended=gc.recommend(rows),
        samples=gc.samples_json(samples),
    )
    js, md = gpu_report.write_reports(args.out, doc)
    print(gpu_report.steps_table(clock.steps))
    tuned = gpu_report.launch_settings_section(manifest.get("launch_settings") or [], doc.get("traffic") or {}, gpu)
    print("\n".join(tuned[1:]))  # orchestrator tune's rows: prefill per -ub, decode with backend sampling on/off
    print("\n".join(vision_section(manifest.get("vision"))[1:]))
    print(f"reports: {js}\n         {md}")
    for n in notes:
        print(f"note: {n}")


if __name__ == "__main__":
    sys.exit(main())
