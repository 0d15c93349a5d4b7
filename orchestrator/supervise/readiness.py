"""Reading a llama-server's health and log: pure functions, tested on literal strings.

What llama-server says (pinned source ``tools/server``):

- ``GET /health`` answers 503 ``{"error": {"message": "Loading model", ...}}`` while the model
  loads (``server-http.cpp``, ``middleware_server_state``) and 200 ``{"status": "ok"}`` once ready
  (``server-context.cpp``, ``get_health``). Older builds answered ``{"status": "loading model"}``,
  so a 200 alone is not "ready": the body must say ``ok`` when it says anything.
- ``/v1/models`` may answer 200 during the load on some builds, which is why readiness is
  ``/health`` only.
- ``listening on http://127.0.0.1:PORT`` is logged (``server.cpp``) once the model is loaded;
  with ``--port 0`` it is how the chosen port is learnt from the log.
- Startup failures leave recognisable lines (``error loading model``, ``GGML_ASSERT``,
  ``CUDA error``, ``couldn't bind``...). They are shown to the person, never used to decide.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable


class Health(enum.Enum):
    """What one ``/health`` probe says about a child."""

    LOADING = "loading"  # 503, or 200 with a non-ok status (older builds)
    READY = "ready"  # 200 {"status": "ok"}
    ERROR = "error"  # any other status code
    UNREACHABLE = "unreachable"  # connection refused, timeout


def classify_health(status_code: int | None, body: str | bytes) -> Health:
    """Map one ``/health`` answer to ``Health``.

    Args:
        status_code: HTTP status, or None when the request got no answer at all.
        body: the response body.
    """
    if status_code is None:
        return Health.UNREACHABLE
    if status_code == 503:
        return Health.LOADING
    if status_code != 200:
        return Health.ERROR
    try:
        doc = json.loads(body or b"null")
    except ValueError:
        return Health.READY
    if isinstance(doc, dict) and "status" in doc:
        return Health.READY if doc["status"] == "ok" else Health.LOADING
    return Health.READY


_LISTENING = re.compile(r"listening on https?://(?:\[[^\]]*\]|[^\s:/]+):(\d+)")


def parse_listening_port(line: str) -> int | None:
    """Return PORT from llama-server's ``listening on http://HOST:PORT`` log line, else None."""
    m = _LISTENING.search(line)
    return int(m.group(1)) if m else None


# Lines worth showing when a start fails (after Ollama llm/status.go). Matched case-insensitively.
FAILURE_MARKERS: tuple[str, ...] = (
    "error loading model",
    "failed to load model",
    "exiting due to",
    "ggml_assert",
    "cuda error",
    "out of memory",
    "couldn't bind",
    "unknown argument",
    "invalid argument",
    "error:",
    "terminate called",
)


def failure_lines(lines: Iterable[str], limit: int = 5) -> list[str]:
    """The last ``limit`` log lines that look like the cause of a failed start."""
    hits = [ln for ln in lines if any(m in ln.lower() for m in FAILURE_MARKERS)]
    return hits[-limit:]


SPEC_BATCH_FAILURE = "failed to process speculative batch"  # server-context.cpp, SRV_ERR before throwing


def is_spec_batch_failure(line: str) -> bool:
    """True for llama-server's speculative-batch failure log line."""
    return SPEC_BATCH_FAILURE in line


# What llama.cpp says about GPU offload while it loads (pinned source): common/arg.cpp warns
# when ``--gpu-layers`` meets a build or a machine without a usable GPU backend (a CPU build, or
# a CUDA build whose runtime found no device: old driver, libcuda missing), and then loads on
# the CPU; src/llama-model.cpp (``load_tensors``) logs ``offloaded N/M layers to GPU`` only when
# a GPU backend exists.
NO_USABLE_GPU = "no usable GPU found"
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def parse_offloaded(line: str) -> tuple[int, int] | None:
    """``(N, M)`` from llama.cpp's ``load_tensors: offloaded N/M layers to GPU``, else None."""
    m = _OFFLOADED.search(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


class OffloadWatch:
    """What one launch's log says about GPU offload; ``problem`` judges it once the server is ready.

    A GPU instance whose llama-server found no usable GPU still loads (on the CPU) and answers
    ``/health`` 200, so readiness must look at the log as well.
    """

    def __init__(self) -> None:
        self.offloaded: tuple[int, int] | None = None
        self.no_gpu: str | None = None

    def reset(self) -> None:
        """A new launch: forget what the last one said."""
        self.offloaded, self.no_gpu = None, None

    def line(self, line: str) -> None:
        """Read one log line."""
        if NO_USABLE_GPU in line and self.no_gpu is None:
            self.no_gpu = line.strip()
        if (found := parse_offloaded(line)) is not None:
            self.offloaded = found

    def problem(self, gpu_layers: str | None) -> str | None:
        """Why a GPU instance launched with ``-ngl gpu_layers`` is not on the GPU, or None.

        Args:
            gpu_layers: the ``-ngl`` value (``"all"`` or a layer count); None = a CPU instance.
        """
        if gpu_layers is None:
            return None
        fix = "check the driver (`nvidia-smi`) and the build (`orchestrator doctor`)"
        if self.no_gpu is not None:
            return f"llama-server runs on the CPU, not the GPU: it logged {self.no_gpu!r}; {fix}"
        if self.offloaded is None:
            return f"llama-server never logged 'offloaded N/M layers to GPU', so it runs on the CPU; {fix}"
        done, total = self.offloaded
        wanted = total if gpu_layers == "all" else min(int(gpu_layers), total)
        if done < wanted or done == 0:
            return f"llama-server offloaded only {done}/{total} layers to the GPU (-ngl {gpu_layers}); {fix}"
        return None
