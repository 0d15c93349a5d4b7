"""Concurrent agent conversations through the endpoint: every request gets its answer.

The load that found the slot livelock (``orchestrator.bench.stress``): 4 clients, 4 conversations
sharing a ~600-token system prompt and each growing its history, 120 chat requests, every second
one streamed, ``max_tokens`` 24; the demo model with MTP drafting
(``n_max`` 3), ``ctx_size`` 3072 per slot, one thread, at ``parallel`` 1, 2 and 4, with prefix
affinity (``id_slot``) and session keys (``prompt_cache_key``) on.

Before the fix, 4-10 of 120 requests got nothing within 20 s in most runs: a request naming a busy
slot by ``id_slot`` was deferred, but on its way there llama-server's slot choice saved that slot in
its prompt cache and loaded another conversation into it, under the task it was running (native
patch 0008's larger cache made it frequent). Each run must answer 120 of 120 with no slot ever
stuck (``/status`` ``no_progress``: the watch would otherwise hide a livelock as a resend).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

from orchestrator.bench.stress import Load, run

pytestmark = [pytest.mark.native, pytest.mark.slow]


@pytest.fixture(scope="module", params=[1, 2, 4], ids=["parallel-1", "parallel-2", "parallel-4"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, bin_info: Any, demo_model: Path
) -> Iterator[Stack]:
    parallel = request.param
    models = [{"name": "demo", "parallel": parallel, "ctx_size": 3072 * parallel, "threads": 1,
               "allow_ctx_beyond_trained": True,
               "speculative": {"type": "draft-mtp", "n_max": 3, "n_min": 0}}]  # fmt: skip
    s = real_stack(tmp_path_factory.mktemp("stress"), demo_model, bin_info, models=models)
    yield s
    s.close()


def test_every_request_of_concurrent_conversations_is_answered(stack: Stack) -> None:
    # the client timeout is generous for a loaded 2-core machine (a livelocked request waits for
    # ever); that no slot ever needed the no-progress watch is what tells a fixed llama-server
    load = Load("demo", clients=4, requests=120, max_tokens=24, timeout=60.0, session_keys=True)
    report = asyncio.run(run(stack.url, load))
    assert not report.failed, report.summary()
    assert len(report.outcomes) == 120
    row = httpx.get(stack.url + "/status", timeout=30).json()["instances"][0]
    assert row["no_progress"] == {"cancels": 0, "restarts": 0}, (row["warnings"], report.summary())
    assert row["stalls"] == 0 and row["restarts"] == 0, row["warnings"]
