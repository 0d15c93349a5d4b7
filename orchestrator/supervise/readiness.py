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


# Where llama.cpp put the weights, from its load log (pinned source): src/llama-model.cpp
# (``load_tensors``) logs one ``<buffer> model buffer size = N MiB`` line per buffer type:
# ``CUDA0`` holds weights on GPU 0, ``CPU``/``CPU_Mapped``/``CPU_REPACK`` and ``CUDA_Host``
# (pinned host memory) are on the host. These lines are logged at verbosity 4 (``-lv 4``), which
# the plan passes to every instance. ``offloaded N/M layers to GPU`` cannot be trusted alone: a
# build with the RPC backend reports every layer "offloaded" with no GPU at all
# (``llama_supports_gpu_offload`` counts RPC). common/arg.cpp warns "no usable GPU found" when
# ``--gpu-layers`` meets a build without any offload backend.
NO_USABLE_GPU = "no usable GPU found"
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_MODEL_BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size")


def parse_offloaded(line: str) -> tuple[int, int] | None:
    """``(N, M)`` from llama.cpp's ``load_tensors: offloaded N/M layers to GPU``, else None."""
    m = _OFFLOADED.search(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_model_buffer(line: str) -> str | None:
    """The buffer name of ``load_tensors:   CUDA0 model buffer size = 21000.00 MiB`` (``CUDA0``), else None."""
    m = _MODEL_BUFFER.search(line)
    return m.group(1) if m else None


def is_device_buffer(name: str) -> bool:
    """True for a buffer in device memory (``CUDA0``), False for host ones (``CPU_Mapped``,
    ``CUDA_Host``) and remote ones (``RPC[...]``)."""
    return not name.startswith(("CPU", "RPC")) and not name.endswith("_Host")


class OffloadWatch:
    """What one launch's log says about GPU offload; ``problem`` judges it once the server is ready.

    A GPU instance whose llama-server found no usable GPU still loads (on the CPU) and answers
    ``/health`` 200, so readiness must look at the log as well.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new launch: forget what the last one said."""
        self.offloaded: tuple[int, int] | None = None
        self.no_gpu: str | None = None
        self.buffers: list[str] = []

    def line(self, line: str) -> None:
        """Read one log line."""
        if NO_USABLE_GPU in line and self.no_gpu is None:
            self.no_gpu = line.strip()
        if (found := parse_offloaded(line)) is not None:
            self.offloaded = found
        if (buffer := parse_model_buffer(line)) is not None:
            self.buffers.append(buffer)

    def problem(self, gpu_layers: str | None) -> str | None:
        """Why a GPU instance launched with ``-ngl gpu_layers`` is not on the GPU, or None.

        Args:
            gpu_layers: the ``-ngl`` value (``"all"`` or a layer count); None = a CPU instance.
        """
        if gpu_layers in (None, "0"):  # a CPU instance, or weights kept on the host on purpose
            return None
        fix = "check the driver (`nvidia-smi`) and the build (`orchestrator doctor`)"
        if self.no_gpu is not None:
            return f"llama-server runs on the CPU, not the GPU: it logged {self.no_gpu!r}; {fix}"
        if self.buffers and not any(is_device_buffer(b) for b in self.buffers):
            return (
                f"llama-server runs on the CPU, not the GPU: its weights are in {', '.join(self.buffers)} "
                f"buffers only; {fix}"
            )
        if self.offloaded is not None:
            done, total = self.offloaded
            wanted = total if gpu_layers == "all" else min(int(gpu_layers), total)
            if done < wanted or done == 0:
                return f"llama-server offloaded only {done}/{total} layers to the GPU (-ngl {gpu_layers}); {fix}"
        return None

    def verdict(self, gpu_layers: str | None) -> tuple[str | None, str | None]:
        """(``problem``: the instance is not on the GPU, ``unconfirmed``: a warning) for ``-ngl gpu_layers``."""
        problem = self.problem(gpu_layers)
        return problem, None if problem else self.unconfirmed(gpu_layers)

    def unconfirmed(self, gpu_layers: str | None) -> str | None:
        """A warning when a GPU instance's log never said where the weights went (no model
        buffer line: a build that logs less), else None."""
        if gpu_layers in (None, "0") or self.buffers or self.no_gpu is not None:
            return None
        return "GPU offload not confirmed: llama-server logged no model buffer line; it may run on the CPU"
