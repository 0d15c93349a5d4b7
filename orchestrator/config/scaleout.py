"""models.yaml keys for serving beyond one machine: ``peers:`` (other OpenAI-compatible
endpoints), a model's ``spillover:`` to a peer, and the ``host:port`` form of a model's ``rpc:``
workers. ``orchestrator.config.schema`` puts them into ``Config`` and ``ModelConfig``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def _endpoint(value: str) -> str:
    # llama.cpp splits at the first ':' (ggml-rpc.cpp parse_endpoint): no IPv6 literals
    host, sep, port = value.partition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port of an RPC worker (e.g. 192.168.1.20:50052)")
    return value


RpcEndpoint = Annotated[str, AfterValidator(_endpoint)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PeerTimeouts(_Section):
    """Seconds; the same meaning as ``server.timeouts`` but towards this peer."""

    connect: float = Field(5, gt=0, description="TCP connect to the peer (s)")
    first_byte: float = Field(600, gt=0, description="wait for the peer's response head (s)")
    idle: float = Field(120, gt=0, description="longest silence inside the peer's response (s)")


class PeerHealth(_Section):
    """How the peer is checked in the background."""

    interval: float = Field(10, gt=0, description="seconds between checks (GET <url>/v1/models)")
    timeout: float = Field(5, gt=0, description="seconds one check may take")


class PeerConfig(_Section):
    """Another OpenAI-compatible endpoint: another orchestrator, a llama-server, a hosted gateway."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="how logs, status and metrics call it")
    url: str = Field(
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$", description="base URL, e.g. http://192.168.1.20:8080 (no /v1)"
    )
    models: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, description="model ids it serves; null = discovered from its /v1/models"
    )
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="environment variable holding its API key (sent as Bearer; never logged)",
    )
    timeouts: PeerTimeouts = Field(default_factory=PeerTimeouts)
    health: PeerHealth = Field(default_factory=PeerHealth)


class SpilloverConfig(_Section):
    """A local model that sends requests to a peer when it cannot keep up or is down."""

    peer: str = Field(description="a name from peers:")
    max_local: int = Field(
        4, ge=1, description="requests of this model waiting or running here at once; the next goes to the peer"
    )
    when_down: bool = Field(True, description="send to the peer while no local replica serves")
