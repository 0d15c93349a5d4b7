"""The ``/status`` row of an ``Instance`` (``status_row``): the JSON row of ``/status``,
``orchestrator status`` and the bench manifest. Its reader of the instance, so the instance never
imports it."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.supervise.instance import Instance
from orchestrator.supervise.states import RUNNING, SERVING, ProcessState


def status_row(inst: Instance) -> dict[str, Any]:
    """One JSON-serialisable row describing ``inst``: identity, state, pid/port, times (Unix s),
    counters, speculation statistics (tokens, acceptance), warnings, exit code and message, the
    log tail while it is FAILED or RESTARTING, and its RPC workers (``WorkerGate.snapshot``) or None."""
    port = int(inst.base_url.rsplit(":", 1)[1]) if inst.base_url else None
    rolling, rolling_n = inst.rolling_acceptance
    return {
        "name": inst.name,
        "model": inst.spec.model,
        "replica": inst.spec.replica,
        "state": inst.state.value,
        "pid": inst.pid if inst.state in RUNNING else None,  # no stale pid once the child is gone
        "last_pid": inst.pid,
        "port": port,
        "base_url": inst.base_url,
        "gpus": list(inst.spec.gpus),
        "gguf": str(inst.spec.gguf),
        # launch settings `orchestrator tune` measures: -b, -ub, the draft's backend sampling (None: default)
        "batch_size": inst.spec.server.batch_size,
        "ubatch_size": inst.spec.server.ubatch_size,
        "backend_sampling": inst.spec.server.speculation.backend_sampling if inst.spec.server.speculation else None,
        "settings": settings_rows(inst),
        "started_at": inst.started_at,
        "ready_at": inst.ready_at,
        "uptime_s": (time.time() - inst.ready_at) if (inst.ready_at and inst.state in SERVING) else None,
        "restarts": inst.restarts,
        "stalls": inst.stalls,
        # busy slots that made no progress: their requests cancelled and sent again, children restarted
        "no_progress": {"cancels": inst.no_progress.cancels, "restarts": inst.no_progress.restarts},
        "responsive": inst.responsive,
        "requests": inst.requests,
        "in_flight": inst.in_flight,
        "decode_tps": inst.decode_tps,
        "speculation": inst.speculation,
        "drafted": inst.drafted,
        "accepted": inst.accepted,
        "acceptance": inst.acceptance,
        "rolling_acceptance": rolling,
        "rolling_drafted": rolling_n,
        "warnings": inst.warnings,
        "features_off": list(inst.spec.features_off),  # what this llama-server lacks of our patches
        "exit_code": inst.exit_code,
        "message": inst.message,
        "log_path": str(inst.log_path),
        "log_tail": inst.log_tail(20) if inst.state in (ProcessState.FAILED, ProcessState.RESTARTING) else [],
        "rpc": inst.workers.snapshot() if inst.workers is not None else None,  # workers, free memory, degraded
    }


def settings_rows(inst: Instance) -> list[dict[str, Any]]:
    """Per models.yaml key that becomes a flag: what models.yaml asked (None: left out), llama-server's
    default per its ``--help``, and what the running llama-server reports (None: not reported, or
    not ready yet)."""
    return [
        {"key": s.key, "flag": s.flag, "asked": s.asked, "default": s.default, "effective": inst.effective.get(s.key)}
        for s in inst.spec.settings
    ]
