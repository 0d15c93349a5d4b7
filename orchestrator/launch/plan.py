"""The launch plan: models.yaml + GPUs + the server's capabilities -> one ``InstanceSpec`` per llama-server.

``plan_launch`` decides, for every model and replica, the GPUs, the port, the speculative
flags and the command line, and refuses (``UserError``) before anything is started when:

- the GGUF (or draft GGUF) is missing, or comes from a fork (``qwen35moe_mtp``);
- ``speculative.type: draft-mtp`` is asked of a GGUF without a NextN/MTP head and no draft;
- the built llama-server does not know ``--spec-type draft-mtp``;
- a fixed port is taken (the message names the process holding it);
- ``ctx_size`` is beyond ``parallel`` x the GGUF's trained context (unless
  ``allow_ctx_beyond_trained``);
- ``cache_type_k``/``cache_type_v`` is a type the model cannot load with (``launch.kv_cache``);
- a model loaded at start does not fit the assigned GPUs' free memory on its own, or CPU
  instances need more than the machine's RAM (unless ``force``; models that only fit one at a
  time are swapped by the scheduler).

Planning is pure apart from reading GGUF headers and checking fixed ports: it starts no
process. The caller probes the server once (``native.capabilities.probe_capabilities``) and
passes the result. Ports: ``port: null`` becomes ``--port 0``: llama-server binds a port the
OS picks and logs ``listening on http://127.0.0.1:PORT`` (the supervisor reads it). The plan
never binds a port, closes it and hands the number on (that races).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.config.schema import Config, ModelConfig
from orchestrator.config.spec_types import drafters
from orchestrator.errors import UserError
from orchestrator.host import disk
from orchestrator.host.gpus import GPU
from orchestrator.host.ports import SERVER_PORT_FIX, check_port_free
from orchestrator.launch.argv import ServerArgs, Speculation
from orchestrator.launch.files import check_not_fork, check_projector, facts_at, model_files, projector_file
from orchestrator.launch.fit import (
    N_UBATCH,
    FitRequest,
    check_fit_per_model,
    cpu_moe_layers,
    estimate_bytes,
    gpu_overhead,
    instance_memory,
    split_shares,
)
from orchestrator.launch.kv_cache import check_kv_types
from orchestrator.launch.needs import check_patch_features
from orchestrator.launch.placement import Placer, placements, tensor_split
from orchestrator.launch.settings import flag_defaults
from orchestrator.launch.spec import CHILD_HOST, SSE_PING_S, InstanceSpec
from orchestrator.launch.speculation import decide_spec, draft_sampling
from orchestrator.launch.template import template_args
from orchestrator.models.facts import ModelFacts
from orchestrator.native.build import BuildInfo
from orchestrator.native.capabilities import ServerCapabilities, library_env
from orchestrator.paths import kv_dir


@dataclass
class _Planned:
    """One model's files, facts and speculation decision, shared by its replicas."""

    i: int
    model: ModelConfig
    gguf: Path
    draft: Path | None
    facts: ModelFacts
    draft_facts: ModelFacts | None
    spec_type: str | None
    notes: list[str]
    template: tuple[Path | None, str | None] = (None, None)  # --chat-template-file, --chat-template-kwargs
    mmproj: Path | None = None  # the vision projector GGUF (its whole file is loaded)


def plan_launch(
    config: Config,
    *,
    gpus: list[GPU],
    build: BuildInfo,
    capabilities: ServerCapabilities,
    force: bool = False,
    facts: dict[str, ModelFacts] | None = None,
    check_ports: bool = True,
    gpu_source: str = "",
    only: str | None = None,
    rpc_free: dict[str, int] | None = None,
) -> list[InstanceSpec]:
    """Plan every llama-server: one per model replica.

    Args:
        config: the validated models.yaml.
        gpus: from ``gpus.detect_gpus()``; ignored (CPU) when the build has no CUDA backend.
        build: ``build.locate()``: the llama-server path and its library folder.
        capabilities: ``probe_capabilities(build)``: backend and ``draft-mtp`` support.
        force: launch even when the fit check says the model will not fit.
        facts: ModelFacts per model name or GGUF path (read from the GGUF header when absent).
        check_ports: check fixed ports (the proxy's ``server.port`` too) are free.
        gpu_source: ``detect_gpus()``'s source line; when no GPU is usable its reason becomes a
            note on every CPU instance (a driver that failed must not go unnoticed).
        only: plan just the model of this name (the bench); other models keep their index, so
            messages name the right models.yaml line.
        rpc_free: free bytes per RPC worker (``host:port``) that answered a probe; a model's
            workers' memory counts in its fit check, a worker missing here counts 0 (noted).
    Returns:
        the specs, in models.yaml order, replica 0 first.
    Raises:
        UserError: see the module docstring; each message names the models.yaml key.
    """
    usable = list(gpus) if capabilities.backend == "cuda" else []
    placer = Placer(usable)
    specs: list[InstanceSpec] = []
    requests: list[FitRequest] = []
    cpu_note = _cpu_note(gpus, gpu_source, capabilities.backend)
    for i, model in enumerate(config.models):
        if only is not None and model.name != only:
            continue
        planned = _plan_model(config, i, model, build, capabilities, facts or {})
        unprobed = [ep for ep in model.rpc if ep not in (rpc_free or {})]
        if unprobed:
            planned.notes.append(f"RPC worker(s) {', '.join(unprobed)} not reachable now: not counted in the fit")
        if gpus and capabilities.backend != "cuda":
            planned.notes.append(
                f"the native build is {capabilities.backend}-only, so it runs on CPU; build with --backend cuda"
            )
        for r, assigned in enumerate(placements(config, i, model, usable, placer)):
            spec = _replica(config, planned, r, assigned, usable, build, capabilities)
            if cpu_note and not assigned:
                spec = dataclasses.replace(spec, notes=(*spec.notes, cpu_note))
            requests.append(request := _fit_request(config, planned, spec, usable, rpc_free or {}))
            specs.append(
                replace(
                    spec,
                    memory=instance_memory(request),
                    features_off=capabilities.features_off,
                    flag_defaults=flag_defaults(capabilities.default),
                )
            )
    fit_notes = check_fit_per_model(config, specs, requests, usable, force)
    specs = [dataclasses.replace(s, notes=s.notes + tuple(fit_notes.get(s.name, ()))) for s in specs]
    _check_ports(config, specs, check_ports)
    return specs


def _cpu_note(gpus: list[GPU], gpu_source: str, backend: str) -> str | None:
    """Why instances run on the CPU when no GPU was found but one was expected: a CUDA build, or
    a driver that is there and failed (anything but nvidia-smi not being installed)."""
    if gpus or not gpu_source:
        return None
    if backend == "cuda" or "nvidia-smi: not installed" not in gpu_source:
        return f"runs on the CPU because no GPU is usable: {gpu_source}; check `nvidia-smi` and `orchestrator doctor`"
    return None


def _plan_model(
    config: Config,
    i: int,
    model: ModelConfig,
    build: BuildInfo,
    capabilities: ServerCapabilities,
    known: dict[str, ModelFacts],
) -> _Planned:
    gguf, draft = model_files(config, i, model)
    model_facts = known.get(model.name) or known.get(str(gguf)) or facts_at(config, i, model, gguf, ("path",))
    check_not_fork(config, i, model, gguf, model_facts, ("path",))
    draft_facts = None
    if draft is not None:
        draft_key = ("speculative", "draft")
        draft_facts = known.get(str(draft)) or facts_at(config, i, model, draft, draft_key)
        check_not_fork(config, i, model, draft, draft_facts, draft_key)
    _check_trained_context(config, i, model, model_facts)
    check_kv_types(config, i, model, model_facts)
    spec_type, notes = decide_spec(config, i, model, gguf, draft, model_facts, draft_facts)
    if "draft-mtp" in drafters(spec_type) and not capabilities.draft_mtp:
        raise UserError(
            f"{config.where('models', i, 'speculative', 'type')}: {build.server} does not support "
            "--spec-type draft-mtp",
            hint="rebuild from the pinned llama.cpp with `orchestrator build --force`, or set speculative.type: none",
        )
    check_patch_features(config, i, model, spec_type, capabilities)
    template_file, kwargs, template_notes = template_args(config, i, model, gguf)
    notes += template_notes
    mmproj = projector_file(config, i, model)
    if mmproj is not None:
        notes += check_projector(config, i, model, mmproj, model_facts)
    template = (template_file, kwargs)
    return _Planned(i, model, gguf, draft, model_facts, draft_facts, spec_type, notes, template, mmproj)


def _check_trained_context(config: Config, i: int, model: ModelConfig, facts: ModelFacts) -> None:
    """Refuse a ``ctx_size`` beyond ``parallel`` x the GGUF's trained context (``context_length``).

    llama-server caps every slot at the trained context (``server-context.cpp``, ``n_ctx_slot``),
    so the rest of the KV cache would be allocated and never used; ``allow_ctx_beyond_trained``
    raises the trained context itself (:func:`ctx_override`).
    """
    trained = facts.context_length
    if not trained or model.allow_ctx_beyond_trained or model.ctx_size <= trained * model.parallel:
        return
    raise UserError(
        f"{config.where('models', i, 'ctx_size')}: ctx_size {model.ctx_size} is more than parallel "
        f"({model.parallel}) x the model's trained context ({trained} tokens): llama-server caps each slot "
        "at the trained context, so the rest would only take memory",
        hint=f"set ctx_size to at most {trained * model.parallel}, raise parallel, or set "
        "allow_ctx_beyond_trained: true (each slot then gets ctx_size / parallel tokens; quality beyond the "
        "trained length is the model's)",
    )


def ctx_override(model: ModelConfig, facts: ModelFacts) -> tuple[str, ...]:
    """``--override-kv <arch>.context_length=int:N`` when ``allow_ctx_beyond_trained`` asks for more
    per slot (N = ctx_size / parallel) than the GGUF's trained context: llama-server caps each slot
    at the GGUF's ``context_length`` key (``n_ctx_train``), and only overriding that key lifts the
    cap; ``--rope-scaling`` and friends do not. Nothing when ``extra_args`` overrides it already."""
    per_slot = model.ctx_size // model.parallel
    trained = facts.context_length
    key = f"{facts.architecture}.context_length"
    if not model.allow_ctx_beyond_trained or not trained or per_slot <= trained:
        return ()
    if any(key in arg for arg in model.extra_args):
        return ()
    return ("--override-kv", f"{key}=int:{per_slot}")


def _replica(
    config: Config,
    p: _Planned,
    r: int,
    assigned: tuple[int, ...],
    usable: list[GPU],
    build: BuildInfo,
    capabilities: ServerCapabilities,
) -> InstanceSpec:
    model = p.model
    port = 0 if not model.port else model.port + r
    if port > 65535:
        raise UserError(
            f"{config.where('models', p.i, 'port')}: replica {r} would get port {port} (> 65535)",
            hint="choose a lower port",
        )
    s = model.speculative
    ngram = s.ngram_mod if "ngram-mod" in drafters(p.spec_type) else None  # unset: the pin's defaults
    ngram_args = (ngram.n_match, ngram.n_min, ngram.n_max) if ngram else None
    speculation = (
        Speculation(p.spec_type, s.n_max, s.n_min, s.p_min, p.draft, ngram_args, s.backend_sampling, draft_sampling(s))
        if p.spec_type
        else None
    )
    server = ServerArgs(
        program=(str(build.server),),
        model=p.gguf,
        alias=model.name,
        host=CHILD_HOST,
        port=port,
        ctx_size=model.ctx_size,
        parallel=model.parallel,
        threads=model.threads,
        batch_size=model.batch_size,
        ubatch_size=model.ubatch_size,
        cache_type_k=model.cache_type_k,
        cache_type_v=model.cache_type_v,
        cache_ram=model.cache_ram,
        gpu_layers=str(model.gpu_layers) if assigned or model.rpc else None,  # RPC devices take -ngl layers
        mmproj=p.mmproj,
        speculation=speculation,
        tensor_split=tensor_split(assigned, usable) if len(assigned) > 1 else None,
        slot_save_path=_slot_save_path(model),
        rpc=tuple(model.rpc),
        # streams never fall silent for long, a long prefill included (the proxy keeps a queue audible)
        sse_ping=SSE_PING_S if "--sse-ping-interval" in capabilities.flags else None,
        fit=_fit(model, build, capabilities, assigned),
        chat_template_file=p.template[0],
        template_kwargs=p.template[1],
        reasoning_preserve=_reasoning_preserve(model, capabilities),
        extra_args=(*ctx_override(model, p.facts), *model.extra_args),
    )
    env = _env(build, capabilities.backend, model, assigned)
    protocol = build.manifest.get("rpc_protocol") if model.rpc else None
    return InstanceSpec(f"{model.name}-{r}", model.name, r, assigned, env, server, tuple(p.notes), protocol)


# a model's own fit settings (common/arg.cpp): with any of them, the fit is the model's
_FIT_FLAGS = ("-fit", "--fit", "-fitt", "--fit-target", "-fitc", "--fit-ctx")


def _fit(
    model: ModelConfig, build: BuildInfo, capabilities: ServerCapabilities, assigned: tuple[int, ...]
) -> bool | None:
    """False (``--fit off``) where llama-server's memory fit could change nothing; None leaves it be.

    The fit (on by default at the pin, common/fit.cpp) loads the model's metadata and vocabulary
    once more before the real load, and again for a draft or MTP head, to lower ``-c`` and
    ``-ngl`` where they are unset. The plan always sets ``-c``; it sets ``-ngl`` for every GPU
    instance, and our own CPU build has no GPU while a CPU replica of our CUDA build sees none
    (``CUDA_VISIBLE_DEVICES``). Off there saves that load on every start and swap (the demo model:
    1.3 -> 0.5 CPU-s). An adopted llama-server the plan places no layers for (a Vulkan or ROCm build
    it cannot see into) keeps its fit, and so does a model whose ``extra_args`` or ``env`` set one."""
    if "--fit" not in capabilities.flags or "LLAMA_ARG_FIT" in model.env:
        return None
    if any(arg.split("=", 1)[0] in _FIT_FLAGS for arg in model.extra_args):
        return None
    ours = not build.manifest.get("adopted") and build.manifest.get("backend") in ("cpu", "cuda")
    return False if assigned or model.rpc or ours else None


def _reasoning_preserve(model: ModelConfig, capabilities: ServerCapabilities) -> bool | None:
    """False (``--no-reasoning-preserve``) for ``preserve_thinking: false`` where the binary has that
    switch: it keeps earlier turns' reasoning by default (the pin's common/arg.cpp), so leaving the
    flag out would leave it on for a template that reads ``preserve_thinking`` (Qwen3.6's)."""
    return False if model.preserve_thinking is False and "--no-reasoning-preserve" in capabilities.flags else None


def _slot_save_path(model: ModelConfig) -> Path | None:
    """``--slot-save-path`` of a ``kv_persist`` model, created now (mode 0700): llama-server refuses
    a path that is not a directory, and the planned command line must run as printed. A folder
    that cannot be made (``host/disk.py``: full, read-only) leaves it out: the model still serves."""
    if not model.kv_persist:
        return None
    return disk.make_folder(f"saved prompt caches of {model.name}", kv_dir(model.name))


def _fit_request(
    config: Config, p: _Planned, spec: InstanceSpec, usable: list[GPU], rpc_free: dict[str, int]
) -> FitRequest:
    n_max = p.model.speculative.n_max if p.spec_type is not None else 0
    n_cpu_moe = cpu_moe_layers(p.model.extra_args, len(p.facts.expert_layer_bytes))
    need = estimate_bytes(
        p.facts,
        p.model.ctx_size,
        p.model.parallel,
        draft_n_max=n_max,
        draft_facts=p.draft_facts if n_max else None,
        n_cpu_moe=n_cpu_moe,
        kv_types=(p.model.cache_type_k, p.model.cache_type_v),
    ) + (p.mmproj.stat().st_size if p.mmproj is not None else 0)  # the projector's weights load whole
    layers = p.model.gpu_layers
    return FitRequest(
        instance=spec.name,
        where=config.where("models", p.i),
        gpus=spec.gpus,
        # llama.cpp offloads up to block_count + 1 layers (the output layer counts): -ngl 99 is all
        partial_offload=layers != "all" and int(layers) <= p.facts.block_count,
        bytes_needed=need,
        overhead=gpu_overhead(p.facts, p.model.parallel, draft_n_max=n_max, ubatch=p.model.ubatch_size or N_UBATCH),
        shares=split_shares(spec.gpus, spec.server.tensor_split, usable),
        expert_layer_bytes=p.facts.expert_layer_bytes,
        n_cpu_moe=n_cpu_moe,
        remote_free=sum(rpc_free.get(endpoint, 0) for endpoint in p.model.rpc),
    )


def _env(build: BuildInfo, backend: str, model: ModelConfig, assigned: tuple[int, ...]) -> dict[str, str]:
    env = library_env(build)
    if backend == "cuda":
        # PCI order = nvidia-smi/NVML order, so our indices mean the same GPUs to CUDA.
        # An empty CUDA_VISIBLE_DEVICES keeps a CPU replica of a CUDA build off every GPU.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(x) for x in assigned)
    env.update(model.env)
    return env


def _check_ports(config: Config, specs: list[InstanceSpec], check: bool) -> None:
    taken: dict[int, str] = {}
    if config.server.port:
        taken[config.server.port] = "server.port"
    for spec in specs:
        if not spec.port:
            continue
        i = next(n for n, m in enumerate(config.models) if m.name == spec.model)
        where = config.where("models", i, "port")
        if spec.port in taken:
            raise UserError(
                f"{where}: port {spec.port} of {spec.name} is also {taken[spec.port]}",
                hint="give each model a distinct port range (replica i uses port + i), or leave port out",
            )
        taken[spec.port] = f"the port of {spec.name}"
    if not check:
        return
    if config.server.port:
        where = config.where("server", "port")
        check_port_free(config.server.host, config.server.port, where=where, fix=SERVER_PORT_FIX)
    for spec in specs:
        if spec.port:
            i = next(n for n, m in enumerate(config.models) if m.name == spec.model)
            check_port_free(spec.host, spec.port, where=config.where("models", i, "port") + f" ({spec.name})")


def plan_lines(specs: list[InstanceSpec]) -> list[str]:
    """The plan as plain text lines (for logs and non-terminal output)."""
    lines = []
    for s in specs:
        where = ",".join(map(str, s.gpus)) if s.gpus else "CPU"
        spec = f"{s.spec_type} n_max={s.n_max} n_min={s.n_min}" if s.spec_type else "speculation off"
        lines.append(f"{s.name}: model {s.model} on {where}, port {s.port or 'auto'}, {spec}")
        lines.append(f"  {s.command_line}")
        lines.extend(f"  note: {n}" for n in s.notes)
    return lines
