"""``orchestrator inspect``: a GGUF's facts as a table or JSON, or the prompt a request renders to."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from orchestrator.config.model_paths import BUILTIN_MODELS
from orchestrator.errors import ApiError, UserError
from orchestrator.models.facts import ModelFacts, read_model_facts
from orchestrator.models.memory import MemoryEstimate, estimate_memory


def _gib(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / (1 << 20):.1f} MiB"


def _load_messages(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read ({err})") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg})") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply to read") from None
    if isinstance(data, list):
        return {"messages": data}
    if isinstance(data, dict) and "messages" in data:
        return data
    raise UserError(f'{path}: expected a JSON list of messages or an object with "messages"')


def render_prompt(model: Path, messages_file: Path) -> str:
    """The prompt text llama-server will see for the request in ``messages_file`` after the
    proxy's request repair (``orchestrator.serve.repair.chat``), rendered with the model's own template.

    Raises ``UserError`` for unreadable JSON, a request the proxy would refuse, or a template
    error (the message quotes the template's rule).
    """
    from orchestrator.models.runtime import render_chat
    from orchestrator.serve.repair.chat import RepairPolicy, repair_request

    body = _load_messages(messages_file)
    try:
        body = repair_request(body, RepairPolicy()).body
    except ApiError as err:
        where = f" ({err.param})" if err.param else ""
        raise UserError(f"{messages_file}: the proxy would refuse this request{where}: {err.message}") from None
    messages = body["messages"]
    ctk = body.get("chat_template_kwargs") or {}
    thinking = ctk.get("enable_thinking") if isinstance(ctk, dict) else None
    tools = body.get("tools") if isinstance(body.get("tools"), list) else None
    return str(render_chat(model, messages, add_generation_prompt=True, enable_thinking=thinking, tools=tools))


def _projector_table(facts: ModelFacts) -> Any:
    """A projector (``mmproj``) GGUF: what models.yaml ``mmproj`` and the fit check need from it."""
    p = facts.projector or {}
    t = Table(title=str(facts.path), show_header=False, title_justify="left")
    t.add_column("fact", style="bold")
    t.add_column("value")
    media = [m for m in ("vision", "audio") if p.get(m)]
    t.add_row("projector", f"{p.get('type') or 'unknown type'} ({', '.join(media) or 'no encoder'})")
    t.add_row("size", f"{_gib(facts.file_size)} ({facts.file_size:,} bytes; loaded whole, counted by the fit check)")
    t.add_row(
        "projects to",
        f"{p['projection_dim']} (the model's embedding width must match)" if p.get("projection_dim") else "-",
    )
    if p.get("image_size"):
        tokens = p.get("tokens_per_image")
        t.add_row(
            "image",
            f"{p['image_size']} px, patch {p.get('patch_size')}, {p.get('vision_blocks')} vision blocks"
            + (f"; {tokens} tokens per image at that size" if tokens else ""),
        )
    t.add_row("use", "models.yaml: mmproj: <this file> on the model it belongs to")
    return t


def _table(facts: ModelFacts, mem: MemoryEstimate | None, mem_mtp: MemoryEstimate | None) -> Any:
    t = Table(title=str(facts.path), show_header=False, title_justify="left")
    t.add_column("fact", style="bold")
    t.add_column("value")
    files = f"{facts.split_count} files" if facts.split_count > 1 else "1 file"
    t.add_row("architecture", facts.architecture)
    t.add_row("name", facts.name or "-")
    t.add_row("size", f"{_gib(facts.file_size)} ({facts.file_size:,} bytes, {files}, GGUF v{facts.gguf_version})")
    t.add_row("parameters", f"{facts.parameter_count:,}")
    t.add_row(
        "tensor types", ", ".join(f"{k} x{v.count} ({_gib(v.bytes)})" for k, v in facts.tensor_types.items()) or "-"
    )
    t.add_row("context length", f"{facts.context_length:,}" if facts.context_length else "-")
    t.add_row(
        "layers",
        f"{facts.block_count} blocks: {facts.trunk_layers} trunk "
        f"({facts.attention_layers} attention, {facts.recurrent_layers} recurrent) + {facts.nextn_layers} NextN",
    )
    mtp = facts.mtp + (f" ({facts.mtp_message})" if facts.mtp_message else "")
    t.add_row("NextN/MTP head", mtp)
    if facts.expert_count:
        t.add_row("experts", f"{facts.expert_used_count} of {facts.expert_count} used per token")
    tpl = facts.chat_template
    t.add_row(
        "chat template",
        f"{tpl.family or 'unknown family'} (sha256 {tpl.sha256}, {tpl.chars:,} chars)" if tpl.present else "none",
    )
    tok = facts.tokenizer
    t.add_row(
        "tokenizer",
        f"{tok.model or '-'} / {tok.pre or '-'}, {tok.vocab_size:,} tokens, "
        f"BOS {tok.bos_id} {tok.bos_text!r}, EOS {tok.eos_id} {tok.eos_text!r}",
    )
    if facts.split_count > 1:
        t.add_row("split files", "\n".join(p.name for p in facts.files))
    for label, m in (("memory", mem), ("memory with MTP", mem_mtp)):
        if m is not None:
            t.add_row(
                f"{label} (ctx {m.ctx:,})",
                f"{_gib(m.total)} = weights {_gib(m.weights)} + KV {_gib(m.kv_cache)} ({m.kv_type}) "
                f"+ recurrent {_gib(m.recurrent_state)}" + (f" [draft n_max {m.draft_n_max}]" if m.draft_n_max else ""),
            )
    return t


def _builtin_path(name: str) -> Path:
    """``builtin:tiny-mtp`` -> the generated demo GGUF, as models.yaml resolves it."""
    from orchestrator.launch.files import builtin_model

    if name not in BUILTIN_MODELS:
        raise UserError(f"unknown builtin model {name!r}", hint=f"known: {', '.join(BUILTIN_MODELS)}")
    return builtin_model(name)


def run(path: Path, *, json_out: bool = False, ctx: int | None = None, render: Path | None = None) -> int:
    """``orchestrator inspect PATH``: print the model's facts (rich table, or JSON with ``--json``).

    ``--ctx N`` sets the context (tokens) of the memory estimate (default: the model's context
    length, capped at 32,768). ``--render messages.json`` prints the prompt instead.
    Returns 0; raises ``UserError`` (exit 2) for every problem with the file.
    """
    if str(path).startswith("builtin:"):
        path = _builtin_path(str(path))
    facts = read_model_facts(path)
    if facts.projector is not None and render is None:
        if json_out:
            print(json.dumps(facts.to_json(), indent=2))
        else:
            Console().print(_projector_table(facts))
        return 0
    if render is not None:
        print(render_prompt(facts.path, render), end="")
        return 0
    # `--ctx 0` is a mistake to report, not a request for the default
    ctx_used = ctx if ctx is not None else min(facts.context_length or 4096, 32768)
    mem = estimate_memory(facts, ctx_used)
    mem_mtp = estimate_memory(facts, ctx_used, draft_n_max=3) if facts.mtp == "embedded" else None
    if json_out:
        out = facts.to_json()
        out["memory"] = asdict(mem)
        out["memory_mtp"] = asdict(mem_mtp) if mem_mtp else None
        print(json.dumps(out, indent=2))
        return 0
    Console().print(_table(facts, mem, mem_mtp))
    return 0
