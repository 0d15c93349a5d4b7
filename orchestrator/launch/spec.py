"""``InstanceSpec``: one llama-server to run, and the new specs a relaunch derives from it."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.launch.argv import ServerArgs, Speculation, render_argv
from orchestrator.launch.settings import LaunchSetting, launch_settings

#: Children always bind loopback: only the proxy faces the network.
CHILD_HOST = "127.0.0.1"
# llama-server pings a silent stream (a long prefill) this often (--sse-ping-interval; its default 30 s
# is longer than some clients wait)
SSE_PING_S = 5


@dataclass(frozen=True)
class InstanceSpec:
    """One llama-server process to run.

    ``server`` holds its command line's arguments; ``argv`` is rendered from them. ``env`` is
    added to the orchestrator's environment. ``notes`` are plan-time remarks for people (CPU
    fallback, forced fit, ...). A port of 0 means llama-server picks one (it logs
    ``listening on http://127.0.0.1:PORT``).
    """

    name: str
    model: str
    replica: int
    gpus: tuple[int, ...]
    env: dict[str, str]
    server: ServerArgs
    notes: tuple[str, ...] = field(default=())
    rpc_protocol: str | None = None  # the build's RPC protocol; a worker speaking another is refused
    memory: int | None = None  # estimated bytes (weights, KV, recurrent state; + compute headroom on GPU)
    # features of our patch queue this llama-server lacks, each with its cost (orchestrator/native/features.py)
    features_off: tuple[str, ...] = ()
    # llama-server's default of each flag a models.yaml key controls, from its --help (``settings``)
    flag_defaults: tuple[tuple[str, str], ...] = ()

    @property
    def rpc(self) -> tuple[str, ...]:
        """RPC workers (``host:port``) this server spreads its layers over; () = none."""
        return self.server.rpc

    @property
    def settings(self) -> list[LaunchSetting]:
        """Every models.yaml key that becomes a flag: the value passed, or llama-server's default."""
        return launch_settings(self.server, self.flag_defaults)

    @property
    def argv(self) -> tuple[str, ...]:
        """The command line; ``argv[0]`` is the program."""
        return render_argv(self.server)

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def alias(self) -> str:
        return self.server.alias

    @property
    def gguf(self) -> Path:
        return self.server.model

    @property
    def speculation(self) -> Speculation | None:
        return self.server.speculation

    @property
    def spec_type(self) -> str | None:
        return self.server.speculation.type if self.server.speculation else None

    @property
    def n_max(self) -> int | None:
        """Draft length K (tokens), None without speculation."""
        return self.server.speculation.n_max if self.server.speculation else None

    @property
    def n_min(self) -> int | None:
        return self.server.speculation.n_min if self.server.speculation else None

    @property
    def draft(self) -> Path | None:
        return self.server.speculation.draft if self.server.speculation else None

    @property
    def command_line(self) -> str:
        """The command for display only (``shlex.join``); never run through a shell."""
        env = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()) if k.startswith("CUDA_")]
        return " ".join([*env, shlex.join(self.argv)])


def without_speculation(spec: InstanceSpec, *, port: int | None = None) -> InstanceSpec:
    """A new spec for the same server without any speculative flag: the acceptance fallback's
    relaunch and the bench's K=0 baseline. ``port`` None keeps the port (0 = OS-picked)."""
    server = dataclasses.replace(spec.server, speculation=None, port=spec.port if port is None else port)
    return dataclasses.replace(spec, server=server)


def with_draft_length(spec: InstanceSpec, *, n_max: int, n_min: int, port: int | None = None) -> InstanceSpec:
    """A new spec with draft lengths ``n_max``/``n_min`` (tokens); a spec without speculation
    only changes port. ``port`` None keeps the port (0 = OS-picked)."""
    spec_args = spec.server.speculation
    if spec_args is not None:
        spec_args = dataclasses.replace(spec_args, n_max=n_max, n_min=n_min)
    server = dataclasses.replace(spec.server, speculation=spec_args, port=spec.port if port is None else port)
    return dataclasses.replace(spec, server=server)


def with_port(spec: InstanceSpec, port: int) -> InstanceSpec:
    """A new spec on ``port`` (0 = OS-picked), otherwise the same."""
    return dataclasses.replace(spec, server=dataclasses.replace(spec.server, port=port))
