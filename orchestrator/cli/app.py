"""The ``orchestrator`` command line. Thin: parse, call one function, print.

Heavy imports (fastapi, uvicorn, numpy, gguf, llama_cpp) happen inside each command, so
``orchestrator --help`` answers instantly (a test enforces it). Every command function in
the owning module returns an exit status; a ``UserError`` becomes one clear line on stderr
and exit status 2, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import typer

from orchestrator.cli.tools import SweepByDefault, run_tool
from orchestrator.errors import UserError

app = typer.Typer(
    name="orchestrator",
    help="Run llama.cpp with MTP speculative decoding behind one OpenAI-compatible endpoint.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # markdown: a docstring's lines are reflowed to the terminal (rich mode kept each source line
    # break, so summaries broke mid-sentence)
    rich_markup_mode="markdown",
)

DEFAULT_CONFIG = Path("models.yaml")


def _run(fn: Callable[[], int | None]) -> None:
    try:
        code = fn()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        if err.hint:
            print(f"  fix: {err.hint}", file=sys.stderr)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    raise typer.Exit(code or 0)


@app.command()
def build(
    backend: str | None = typer.Option(None, help="auto, cpu or cuda (default: models.yaml build.backend, else auto)"),
    cuda_arch: str | None = typer.Option(
        None, help="CUDA compute capabilities, e.g. 120, 89;90, 12.0 (default: models.yaml build.cuda_arch)"
    ),
    jobs: int | None = typer.Option(None, help="parallel compile jobs (default: CPU count)"),
    force: bool = typer.Option(False, help="rebuild even when the cached build is up to date"),
    show: bool = typer.Option(False, help="print the manifest of the current build and exit"),
    config: Path | None = typer.Option(None, "--config", "-c", help="models.yaml whose build: block gives defaults"),
    no_patches: bool = typer.Option(
        False, "--no-patches", help="build only llama-server, without native/patches (never the current build)"
    ),
    source: Path | None = typer.Option(
        None,
        "--source",
        help="build your own llama.cpp (a folder or a tarball) with native/patches instead of the pin; reports each "
        "patch as applied, already upstream or conflict, and the features then off",
    ),
) -> None:
    """Fetch the pinned llama.cpp, apply native/patches and build llama-server + libllama."""
    from orchestrator.cli import build as m

    _run(
        lambda: m.run(
            backend=backend,
            cuda_arch=cuda_arch,
            jobs=jobs,
            force=force,
            show=show,
            config=config,
            no_patches=no_patches,
            source=source,
        )
    )


@app.command()
def doctor(config: Path = typer.Option(DEFAULT_CONFIG, "--config", "-c")) -> None:
    """Check the toolchain, GPUs, native build, port and demo model; one line each."""
    from orchestrator.cli import doctor as m

    _run(lambda: m.run(config))


@app.command()
def inspect(
    path: Path = typer.Argument(..., help="a .gguf file (first split file for split models)"),
    json_out: bool = typer.Option(False, "--json", help="machine-readable output"),
    ctx: int | None = typer.Option(None, help="context length (tokens) for the memory estimate"),
    render: Path | None = typer.Option(None, help="messages JSON: print the prompt the server will see"),
) -> None:
    """Read a GGUF's header: architecture, NextN/MTP head, template, memory estimate."""
    from orchestrator.cli import inspect as m

    _run(lambda: m.run(path, json_out=json_out, ctx=ctx, render=render))


@app.command("make-tiny-model")
def make_tiny_model(
    out: Path = typer.Argument(..., help="output .gguf path"),
    mode: str = typer.Option("echo", help="echo (tunable acceptance) or random"),
    q: float = typer.Option(0.0, help="echo mode: fraction of tokens whose draft is wrong (acceptance = 1 - q)"),
    seed: int = typer.Option(0),
    variant: str = typer.Option(
        "embedded", help="embedded (MTP head inside), separate (writes OUT and OUT.draft.gguf) or dense"
    ),
    shape: str | None = typer.Option(
        None, help="a real model's shapes instead of the tiny ones, e.g. qwen3.6-35b-a3b (echo mode, head embedded)"
    ),
    quant: str = typer.Option("q4_k_m", help="with --shape: q4_k_m (Q4_K_M-like mix), q8_0 or f16"),
    scale: str = typer.Option(
        "full", help="with --shape: full, medium (~1.7 GB), small (~65 MB, CPU tests) or bed (draft-length test bed)"
    ),
    profile: str = typer.Option(
        "plain", help="with --shape: plain (drafts wrong for a fraction q) or kinds (right on Latin, wrong on CJK)"
    ),
    mmproj: Path | None = typer.Option(
        None, help="also write a tiny vision projector GGUF here (models.yaml mmproj: images with MTP on)"
    ),
) -> None:
    """Write a tiny qwen35moe GGUF with a NextN/MTP head (the demo and test model), or with
    --shape a model with a real model's shapes and the same echo behaviour (zero tensors sparse)."""
    from orchestrator.cli import make_model as m

    if shape is not None:
        _run(lambda: m.run_shaped(out, shape=shape, quant=quant, q=q, seed=seed, scale=scale, profile=profile))
        return

    _run(lambda: m.run(out, mode=mode, q=q, seed=seed, variant=variant, mmproj=mmproj))


@app.command()
def up(
    config: Path = typer.Option(DEFAULT_CONFIG, "--config", "-c"),
    dry_run: bool = typer.Option(False, help="print the launch plan and exit"),
    force: bool = typer.Option(False, help="launch even when the fit check says it will not fit"),
    offline: bool = typer.Option(False, help="never download: an hf: model not yet pulled is an error"),
    llama_server: Path | None = typer.Option(
        None, help="serve through this llama-server (a llama.cpp you have) instead of `orchestrator build`'s"
    ),
) -> None:
    """Launch one llama-server per model and GPU, supervise them, serve one endpoint (pulling hf: models first)."""
    from orchestrator.cli import up as m

    _run(lambda: m.run_up(config, dry_run=dry_run, force=force, offline=offline, llama_server=llama_server))


@app.command()
def pull(
    # rich reads a bare "[@...]" as markup and drops it from the help: escaped
    source: str = typer.Argument(
        ..., help="REPO[:QUANT_OR_FILE]\\[@REVISION], e.g. unsloth/Qwen3.6-35B-A3B-GGUF:UD-Q4_K_XL"
    ),
    mmproj: bool = typer.Option(
        False, "--mmproj", help="the source names the repository's vision projector (REPO[:FILE_OR_PRECISION])"
    ),
) -> None:
    """Download a GGUF (all split parts, and a separate MTP head) from the Hugging Face Hub into its
    shared cache: resumable, with progress, checked against the hub's sha256."""
    from orchestrator.cli import pull as m

    _run(lambda: m.run(source, projector=mmproj))


@app.command()
def connect(
    client: str = typer.Argument(..., help="claude-code, codex, qwen-code, opencode, kilo, continue, aider, openwebui"),
    config: Path | None = typer.Option(
        None, "--config", "-c", help="models.yaml (default: the running up's, else ./models.yaml)"
    ),
    model: str | None = typer.Option(None, help="the model the client uses (default: the first in models.yaml)"),
    write: bool = typer.Option(False, "--write", help="update the client's own config files (a backup first)"),
    show_key: bool = typer.Option(False, "--show-key", help="print the API key (hidden otherwise)"),
    max_output: int | None = typer.Option(
        None, help="the longest answer (tokens) the client asks for (default: a quarter of the context window)"
    ),
) -> None:
    """Print an agent's or app's settings for this endpoint (address, key, models, context window);
    --write puts them in the client's config file."""
    from orchestrator.cli import connect as m

    _run(lambda: m.run(client, config, model=model, write=write, show_key=show_key, max_output=max_output))


@app.command()
def worker(
    host: str = typer.Option("127.0.0.1", help="address to bind; anything but loopback is reachable by others"),
    port: int = typer.Option(50052, help="TCP port (0: let the OS pick)"),
    device: list[str] = typer.Option([], "--device", "-d", help="ggml device to expose (CUDA0, CPU); repeatable"),
    threads: int | None = typer.Option(None, help="CPU threads of the worker"),
) -> None:
    """Run llama.cpp's RPC worker (ggml-rpc-server) so another machine's models can use this one's devices."""
    from orchestrator.cli import worker as m

    _run(lambda: m.run(host=host, port=port, devices=device, threads=threads))


@app.command()
def status(json_out: bool = typer.Option(False, "--json")) -> None:
    """Show the instances of the running orchestrator."""
    from orchestrator.cli import control as m

    _run(lambda: m.status(json_out=json_out))


@app.command()
def ps(json_out: bool = typer.Option(False, "--json")) -> None:
    """Show the models: state, device, memory, idle time, time until unload."""
    from orchestrator.cli import models as m

    _run(lambda: m.ps(json_out=json_out))


@app.command()
def load(name: str = typer.Argument(..., help="model name or alias")) -> None:
    """Load a model now (evicting idle ones if memory is short) and wait until it serves."""
    from orchestrator.cli import models as m

    _run(lambda: m.load(name))


@app.command()
def unload(name: str = typer.Argument(..., help="model name or alias")) -> None:
    """Unload a model once its requests in flight have finished."""
    from orchestrator.cli import models as m

    _run(lambda: m.unload(name))


@app.command()
def reload() -> None:
    """Re-read models.yaml in the running orchestrator (also done on file change and on SIGHUP)."""
    from orchestrator.cli import models as m

    _run(m.reload)


@app.command()
def logs(
    name: str = typer.Argument(..., help="instance name, e.g. demo-0 (or the model name when it has one replica)"),
    follow: bool = typer.Option(False, "--follow", "-f"),
    lines: int = typer.Option(50, "--lines", "-n"),
) -> None:
    """Print an instance's llama-server log."""
    from orchestrator.cli import control as m

    _run(lambda: m.logs(name, follow=follow, lines=lines))


@app.command()
def down(timeout: float = typer.Option(30.0, help="seconds to wait for a graceful stop")) -> None:
    """Stop the running orchestrator and its llama-servers."""
    from orchestrator.cli import control as m

    _run(lambda: m.down(timeout=timeout))


@app.command()
def tune(
    model: str | None = typer.Argument(None, help="model name from models.yaml (default: the only one)"),
    config: Path = typer.Option(DEFAULT_CONFIG, "--config", "-c"),
    ubatch: str = typer.Option("512,1024,2048", help="physical batch sizes (-ub) to measure prefill with"),
    depths: str = typer.Option("8k,32k", help="prompt depths in tokens for the prefill rate (agent context)"),
    rounds: int = typer.Option(3, help="interleaved rounds (the figures are medians over them)"),
    n_predict: int = typer.Option(64, help="tokens generated for the decode rate"),
    apply: bool = typer.Option(False, "--apply", help="write the recommended settings into models.yaml"),
    force: bool = typer.Option(False, "--force", help="launch even when the fit check says the model will not fit"),
) -> None:
    """Measure the launch settings for this machine: prefill per -ub at agent depths, decode with
    and without the draft's backend sampling; recommend, and with --apply write them."""
    from orchestrator.cli import tune as m

    _run(
        lambda: m.run_tune(
            model,
            config=config,
            ubatch=ubatch,
            depths=depths,
            rounds=rounds,
            n_predict=n_predict,
            apply=apply,
            force=force,
        )
    )


bench_app = typer.Typer(
    cls=SweepByDefault,
    help="Measure: the draft-length sweep (the default: `orchestrator bench [MODEL] --k 0,1,2,3 --apply`; "
    "its options: `orchestrator bench sweep --help`), and the benchmarks behind our published figures "
    "(policy, agent, proxy, gpu; each one's --help is its own).",
    no_args_is_help=False,
    invoke_without_command=False,
    rich_markup_mode="markdown",
)
app.add_typer(bench_app, name="bench")


@bench_app.command("sweep")
def bench(
    model: str | None = typer.Argument(None, help="model name from models.yaml (default: the only one)"),
    config: Path = typer.Option(DEFAULT_CONFIG, "--config", "-c"),
    k: str = typer.Option("0,1,2,3,4,6,8", "--k", help="draft lengths to sweep; 0 is the no-speculation baseline"),
    prompts: str = typer.Option("math,code,general", help="built-in prompt sets"),
    prompts_file: Path | None = typer.Option(None, help="JSONL with {domain, prompt} per line"),
    n_predict: int = typer.Option(128, help="tokens to generate per request"),
    reps: int = typer.Option(3, help="repetitions per (K, prompt)"),
    seeds: str = typer.Option("0", help="comma-separated sampling seeds"),
    temperature: float = typer.Option(0.0),
    out: Path = typer.Option(Path("results"), help="results folder"),
    apply: bool = typer.Option(False, "--apply", help="write the recommended K into models.yaml"),
    force: bool = typer.Option(False, "--force", help="launch even when the fit check says the model will not fit"),
    depths: str = typer.Option("0", help="prompt depths in tokens, e.g. 0,8k,32k (agent context before each prompt)"),
) -> None:
    """Sweep the draft length K against a no-speculation baseline and recommend the best K."""
    from orchestrator.cli import bench as m

    _run(
        lambda: m.run_bench(
            model,
            config=config,
            k=k,
            prompts=prompts,
            prompts_file=prompts_file,
            n_predict=n_predict,
            reps=reps,
            seeds=seeds,
            temperature=temperature,
            out=out,
            apply=apply,
            force=force,
            depths=depths,
        )
    )


@bench_app.command("sampling")
def bench_sampling(
    model: str | None = typer.Argument(None, help="model name from models.yaml (default: the only one)"),
    config: Path = typer.Option(DEFAULT_CONFIG, "--config", "-c"),
    k: int | None = typer.Option(None, "--k", help="draft length (default: the model's speculative.n_max)"),
    temperatures: str = typer.Option("0,0.6,1.0", help="request temperatures to measure each mode at"),
    prompts: str = typer.Option("math,code,general", help="built-in prompt sets"),
    n_predict: int = typer.Option(64, help="tokens to generate per request"),
    reps: int = typer.Option(2, help="repetitions per (prompt, seed)"),
    seeds: str = typer.Option("0,1,2", help="comma-separated sampling seeds"),
    out: Path = typer.Option(Path("results-sampling"), help="results folder"),
) -> None:
    """Greedy against probabilistic drafting (--spec-draft-sampling) at each temperature: acceptance and tok/s."""
    from orchestrator.cli import bench as m

    _run(
        lambda: m.run_sampling(
            model, config=config, k=k, temperatures=temperatures, prompts=prompts, n_predict=n_predict,
            reps=reps, seeds=seeds, out=out,
        )
    )  # fmt: skip


# The benchmarks that reproduce a published figure: each runs its tool from the source checkout
# with the arguments as given (`orchestrator bench proxy --help` is that tool's help).
_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


@bench_app.command("policy", context_settings=_PASS_THROUGH, add_help_option=False)
def bench_policy(ctx: typer.Context) -> None:
    """The adaptive draft length against every static K on the mixed test bed (tokens per CPU second)."""
    _run(lambda: run_tool("bench_draft_policy.py", ctx.args))


@bench_app.command("agent", context_settings=_PASS_THROUGH, add_help_option=False)
def bench_agent(ctx: typer.Context) -> None:
    """Agent sessions (user turns, alternating and concurrent sessions, side requests, an unload), before and
    after: per turn processed and new tokens, TTFT, the longest silence."""
    _run(lambda: run_tool("bench_agent.py", ctx.args))


@bench_app.command("proxy", context_settings=_PASS_THROUGH, add_help_option=False)
def bench_proxy(ctx: typer.Context) -> None:
    """The proxy's cost: direct llama-server, its router mode and ours (added p50, tok/s, CPU per token)."""
    _run(lambda: run_tool("bench_proxy.py", ctx.args))


@bench_app.command("gpu", context_settings=_PASS_THROUGH, add_help_option=False)
def bench_gpu(ctx: typer.Context) -> None:
    """The GPU check: a generated model of the real shapes measured on this machine's GPU (--cpu: the CPU check)."""
    _run(lambda: run_tool("gpu_check.sh", ctx.args))


if __name__ == "__main__":  # pragma: no cover
    app()
