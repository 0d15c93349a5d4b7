"""The model lifecycle keys of models.yaml (``orchestrator.supervise.scheduler``) and their types:
idle time (``ttl``), memory sizes (``memory_reserve``, ``memory_budget`` values) and device names
(``memory_budget`` keys). ``ServerConfig`` and ``ModelConfig`` take these fields from the
``ServerLifecycle`` and ``ModelLifecycle`` bases."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ByteSize, Field, WithJsonSchema


def _ttl(value: Any) -> Any:
    # `ttl: never` (or null) keeps a model loaded; YAML may also write `ttl: 0` for the same
    if value is None or (isinstance(value, str) and value.strip().lower() == "never") or value == 0:
        return "never"
    return value


TTL = Annotated[
    Annotated[float, Field(gt=0)] | Literal["never"],
    BeforeValidator(_ttl),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number", "minimum": 0}, {"enum": ["never"], "type": "string"}, {"type": "null"}],
            "description": "idle seconds before unload; never (or 0) = stay loaded",
        }
    ),
]


def _device_key(value: Any) -> Any:
    # YAML reads `0: 20GiB` with an int key; devices are named "cpu" or "0", "1", ...
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return value.strip().lower()
    return value


DeviceKey = Annotated[str, BeforeValidator(_device_key), Field(pattern=r"^(cpu|\d+)$")]
Bytes = Annotated[
    ByteSize,
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": "^\\s*\\d*\\.?\\d+\\s*[A-Za-z]*\\s*$"},
            ],
            "description": "bytes, or a size such as 20GiB, 512MiB, 1.5GB",
        }
    ),
]


class ServerLifecycle(BaseModel):
    """The server-wide lifecycle keys (the ``server`` block)."""

    ttl: TTL = Field(1800.0, description="idle seconds before a model unloads (never = keep it); per model: ttl")
    queue_limit: int = Field(64, ge=1, description="held requests per model (load, swap); beyond it 429")
    memory_reserve: Bytes = Field(ByteSize(1 << 30), description="left free on every device (GPU, host RAM)")
    memory_budget: dict[DeviceKey, Bytes] = Field(
        default_factory=dict, description="per device ('cpu', GPU index): what models may use, instead of measured"
    )


class ModelLifecycle(BaseModel):
    """The lifecycle keys of one model."""

    load: Literal["on_start", "on_demand"] = Field("on_start", description="load when `up` starts, or on 1st request")
    ttl: TTL | None = Field(None, description="idle seconds before unload; never = stay loaded; absent = server.ttl")
    pinned: bool = Field(False, description="never unloaded for memory or idleness (only by an explicit unload)")
    queue_limit: int | None = Field(None, ge=1, description="held requests beyond this get 429; absent = server's")
