"""Helpers for the prompt-cache persistence tests: real llama-server instances with a context long
enough for a 1,500-token prefix and a slot save folder, and long prompts."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx

from orchestrator.launch.spec import InstanceSpec
from orchestrator.native.build import BuildInfo
from orchestrator.supervise.supervisor import SERVING, Instance
from tests.supervision_helpers import fast_policy, make_config, real_spec, wait_state

CTX = 4096  # tokens per server: room for a 1,600-token prefix in each of 2 slots
PREFIX_WORDS = 420  # "itemN alpha beta gamma" x 420 is about 1,700 tokens with the tiny model's vocabulary


def long_text(tag: str, words: int = PREFIX_WORDS) -> str:
    """A long text whose first token already differs between tags (so two prefixes share nothing)."""
    return " ".join(f"{tag}{i} alpha beta gamma" for i in range(words))


def kv_spec(
    bin_info: BuildInfo,
    model: Path,
    save_dir: Path,
    *,
    name: str = "demo-0",
    parallel: int = 1,
    extra: tuple[str, ...] = (),
) -> InstanceSpec:
    """A real llama-server spec with ``--slot-save-path save_dir`` and a ``CTX`` context."""
    spec = real_spec(bin_info.server, bin_info.lib_dir, model, name=name, extra=extra)
    server = dataclasses.replace(spec.server, ctx_size=CTX * parallel, parallel=parallel, slot_save_path=save_dir)
    return dataclasses.replace(spec, server=server)


async def started(spec: InstanceSpec, log_dir: Path) -> Instance:
    """An ``Instance`` of ``spec``, started and serving (60 s bound)."""
    inst = Instance(spec, make_config(), log_dir=log_dir, policy=fast_policy())
    inst.start()
    await wait_state(inst, SERVING, 120.0)
    return inst


async def complete(url: str, prompt: str | list[int], **extra: Any) -> dict[str, Any]:
    """``POST /completion`` (greedy, one token unless ``n_predict`` says otherwise)."""
    body = {"prompt": prompt, "n_predict": 1, "temperature": 0, "cache_prompt": True, **extra}
    async with httpx.AsyncClient(trust_env=False, timeout=300.0) as client:
        resp = await client.post(f"{url}/completion", json=body)
    resp.raise_for_status()
    data: dict[str, Any] = resp.json()
    return data


def run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """A sync test running coroutine test ``fn`` in a fresh event loop (fixtures pass through)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper
