"""models.yaml as pydantic models, and its JSON schema.

The JSON schema in ``orchestrator/data/models.schema.json`` is generated from these classes
(``python -m orchestrator.config.schema`` rewrites it; a test checks that it is current), so
editors with yaml-language-server validate as you type. ``orchestrator.config.load`` reads a
file into ``Config``.

Rules beyond the types:
- ``speculative.n_min`` must be <= ``n_max``; setting ``n_max``/``n_min``/``p_min``/``draft``
  together with ``type: none`` is an error (the flags only work together).
- ``type: mtp`` (the fork / model-card spelling) is accepted and normalised to ``draft-mtp``.
- Model names and aliases are unique across the file.
- ``extra_args`` may not carry a flag the launch plan sets itself (``-m``, ``--port``,
  ``--host``, ``--spec-type``, ...): it would fight the plan, so the error names the key to use.
"""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from orchestrator.config.agent_types import SYSTEM_MESSAGES_ABOUT, ModelAgentKeys
from orchestrator.config.build_types import BuildConfig
from orchestrator.config.kv_types import WarmPrefix
from orchestrator.config.launch_types import ModelLaunchKeys
from orchestrator.config.lifecycle_types import ModelLifecycle, ServerLifecycle
from orchestrator.config.limits_types import ServerLimits
from orchestrator.config.media_types import ModelMediaKeys
from orchestrator.config.model_paths import check_path
from orchestrator.config.plan_flags import PLAN_ENV, PLAN_FLAGS
from orchestrator.config.problems import UNIQUE_MSG, Lines, format_loc, located, nearest_line
from orchestrator.config.scaleout import PeerConfig, RpcEndpoint, SpilloverConfig
from orchestrator.config.spec_types import NgramModConfig, SpecType, drafters

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "data" / "models.schema.json"
SCHEMA_COMMENT = "# yaml-language-server: $schema=./orchestrator/data/models.schema.json"


def _mentions(annotation: Any, kinds: tuple[type, ...]) -> bool:
    """Whether a field annotation (through unions, Annotated, list[...]) names one of ``kinds``."""
    if annotation in kinds:
        return True
    return any(_mentions(arg, kinds) for arg in typing.get_args(annotation))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        # pydantic's lax mode reads `ctx_size: true` as 1 and `connect: yes` as 1.0 s; a YAML
        # boolean in a number field is always a slip, so refuse it at its key.
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                if (
                    isinstance(value, bool)
                    and field is not None
                    and _mentions(field.annotation, (int, float))
                    and not _mentions(field.annotation, (bool,))
                ):
                    raise located(key, f"should be a number, not a boolean (got {str(value).lower()})")
        return data


class Timeouts(_Strict):
    """Timeouts in seconds."""

    connect: float = Field(10, gt=0, description="proxy -> upstream TCP connect (s)")
    first_byte: float = Field(600, gt=0, description="proxy -> upstream: wait for the first response byte (s)")
    idle: float = Field(120, gt=0, description="proxy -> upstream: longest silence inside a response (s)")
    load: float = Field(
        600, gt=0, description="supervisor: /health must answer 200 within this (s); extended while the child logs"
    )
    queue: float = Field(
        300, gt=0, description="proxy: how long a request waits for its model to load or a replica to serve (s)"
    )
    client_header: float = Field(
        10, gt=0, description="proxy: a client's request headers must arrive within this (s), else 408"
    )
    client_body: float = Field(
        60, gt=0, description="proxy: a client's request body must arrive within this (s), else 408"
    )
    stall: float = Field(
        30,
        gt=0,
        description="supervisor: llama-server's main loop answering nothing this long is a stall: kill, restart (s)",
    )
    no_progress: float = Field(
        8,
        gt=0,
        description="supervisor: a busy slot whose prompt and decoded tokens do not advance this long while the main "
        "loop answers (longer on a child whose steps are slow) is stuck: its request is cancelled and sent again, "
        "then the child restarted (s)",
    )
    keepalive: float = Field(
        5, gt=0, description="a held streaming request gets an SSE comment line this often while it waits (s)"
    )
    drain: float = Field(
        300, gt=0, description="unload/reload: how long a model's in-flight requests get to finish before it stops (s)"
    )
    shutdown_grace: float = Field(10, ge=0, description="in-flight requests get this long on SIGINT/SIGTERM (s)")


class ResponsesStoreConfig(_Strict):
    """OpenAI Responses ``store: true``: responses kept for ``previous_response_id`` and
    ``GET``/``DELETE /v1/responses/{id}``, in memory and in the state folder."""

    max_bytes: int = Field(
        64 << 20, ge=0, description="bytes of stored responses kept (the oldest go first); 0 = store nothing"
    )
    ttl: float = Field(7 * 86400, gt=0, description="seconds a stored response is kept after it was stored")


class ServerConfig(ServerLifecycle, ServerLimits, _Strict):
    """The orchestrator's own OpenAI-compatible endpoint."""

    host: str = Field("127.0.0.1", description="address the proxy binds; children always bind 127.0.0.1")
    port: int = Field(8080, ge=0, le=65535, description="port the proxy binds (0 = OS-picked)")
    api_keys: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="Bearer tokens; empty = no auth"
    )
    auth_health: bool = Field(False, description="require the key on /health")
    auth_metrics: bool = Field(False, description="require the key on /metrics")
    cors_origins: list[str] = Field(default_factory=list, description="CORS off when empty")
    ollama_api: bool = Field(
        True,
        description="serve Ollama's API at /api/* (a change needs a restart); off for benchmark harnesses that "
        "probe /api/version and /api/tags and then measure in Ollama's mode",
    )
    max_body_bytes: int = Field(32 * 1024 * 1024, gt=0, description="largest request body (bytes)")
    max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="largest request head: request line and headers (bytes); more is a 431"
    )
    when_loading: Literal["hold", "reject"] = Field(
        "hold", description="requests while no replica is ready: hold (up to timeouts.queue) or 503 + Retry-After"
    )
    timeouts: Timeouts = Field(default_factory=Timeouts)
    kv_disk_budget: int = Field(16 << 30, ge=0, description="bytes of saved prompt caches kept on disk (LRU)")
    default_model: str | None = Field(
        None,
        description="the model (name or alias) a request without 'model' gets when neither its conversation nor "
        "the one loaded model decides",
    )
    responses_store: ResponsesStoreConfig = Field(default_factory=ResponsesStoreConfig)


class SpeculativeConfig(_Strict):
    """MTP (NextN) speculative decoding for one model (llama.cpp common/speculative.cpp)."""

    type: SpecType = None
    n_max: int = Field(3, ge=1, description="draft length K: most tokens drafted per step (--spec-draft-n-max)")
    n_min: int = Field(1, ge=0, description="fewest tokens drafted per step (--spec-draft-n-min)")
    p_min: float | None = Field(
        None, ge=0, le=1, description="drop draft tokens below this probability (--spec-draft-p-min)"
    )
    draft: str | None = Field(None, description="separate NextN-only GGUF (-md); relative to this file")
    acceptance_floor: float = Field(
        0.3, ge=0, le=1, description="warn when rolling acceptance (over >= 500 drafted tokens) drops below"
    )
    spec_fallback: Literal["warn", "relaunch_without_spec"] = "warn"
    ngram_mod: NgramModConfig | None = Field(None, description="ngram-mod drafter settings (type lists ngram-mod)")
    adaptive: bool = Field(False, description="choose K per request from live acceptance and speed (<= n_max)")
    backend_sampling: bool | None = Field(
        None,
        description="sample the draft on the GPU: true = --spec-draft-backend-sampling, false = "
        "--no-spec-draft-backend-sampling (less GPU memory per slot), null/absent = llama-server's default "
        "(on at the pin; `orchestrator up --dry-run` shows it)",
    )
    sampling: Literal["greedy", "probabilistic"] | None = Field(
        None,
        description="how the draft is sampled (--spec-draft-sampling, llama.cpp b11434+): greedy takes the "
        "drafter's most likely token and the target checks it by matching; probabilistic samples the draft and the "
        "target verifies it by rejection sampling when the request's temperature > 0 (agents' 0.6-1.0). Unset: "
        "greedy, llama-server's default (docs/draft-length.md has the measurement it was chosen from)",
    )

    @model_validator(mode="after")
    def _flags_together(self) -> SpeculativeConfig:
        if self.ngram_mod is not None and "ngram-mod" not in drafters(self.type):
            raise located("ngram_mod", "is set but speculative.type does not list ngram-mod")
        if self.type == "none":
            for key in ("n_max", "n_min", "p_min", "draft", "adaptive", "backend_sampling", "sampling"):
                if key in self.model_fields_set:
                    raise located(key, f"is set but speculative.type is none; remove {key} or set type: draft-mtp")
        if self.n_min > self.n_max:
            raise located("n_min", f"must be <= n_max ({self.n_max})")
        return self


class ModelConfig(ModelLifecycle, ModelAgentKeys, ModelLaunchKeys, ModelMediaKeys, _Strict):
    """One model: one llama-server process per replica."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="the model id clients send; also the llama-server --alias",
    )
    path: str = Field(
        min_length=1,
        description="GGUF file (first part of a split model), relative to this file; 'builtin:tiny-mtp' = the "
        "generated demo model; 'hf:OWNER/NAME[:QUANT_OR_FILE]' = a Hugging Face repository (`orchestrator pull`)",
    )
    aliases: list[Annotated[str, Field(pattern=r"^\S+$")]] = Field(
        default_factory=list, description="other model ids routed to this model"
    )
    gpus: list[Annotated[int, Field(ge=0)]] | Literal["auto"] = Field(
        "auto", description="GPU indices for one replica (several = one process with --tensor-split), or auto"
    )
    replicas: Annotated[int, Field(ge=1)] | list[list[Annotated[int, Field(ge=0)]]] = Field(
        1, description="replica count, or one GPU list per replica"
    )
    ctx_size: int = Field(
        4096,
        ge=1,
        le=2**31 - 1,  # llama-server reads -c as an int32
        description="context length per server (tokens), shared by its slots (-c); at most the model's trained "
        "context per slot unless allow_ctx_beyond_trained",
    )
    allow_ctx_beyond_trained: bool = Field(
        False,
        description="allow ctx_size above parallel x the GGUF's trained context: each slot gets ctx_size / parallel "
        "tokens (the GGUF's context_length is raised with --override-kv <arch>.context_length=int:N)",
    )
    gpu_layers: Annotated[int, Field(ge=0)] | Literal["all"] = Field("all", description="layers offloaded (-ngl)")
    parallel: int = Field(1, ge=1, description="slots per server (-np)")
    port: int | None = Field(
        None, ge=0, le=65535, description="fixed port for replica 0 (+i for replica i); null/0 = OS-picked"
    )
    extra_args: list[str] = Field(default_factory=list, description="more llama-server flags, e.g. ['-fa', 'on']")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for the llama-server process")
    speculative: SpeculativeConfig = Field(default_factory=SpeculativeConfig)
    system_messages: Literal["in_place", "merge", "to_user"] = Field("in_place", description=SYSTEM_MESSAGES_ABOUT)
    thinking: bool | None = Field(None, description="default enable_thinking for this model; null = the template's")
    kv_persist: bool = Field(True, description="save slots before a stop, restore them (verified) at the next load")
    warm_prefixes: list[WarmPrefix] = Field(default_factory=list, description="system messages warmed at load")
    rpc: list[RpcEndpoint] = Field(
        default_factory=list, description="RPC workers (`orchestrator worker`) sharing the layers: host:port each"
    )
    spillover: SpilloverConfig | None = Field(None, description="send requests to a peer when busy or down")

    @field_validator("path")
    @classmethod
    def _path_known(cls, value: str) -> str:
        return check_path(value)

    @field_validator("gpus")
    @classmethod
    def _gpus_unique(cls, value: list[int] | str) -> list[int] | str:
        if isinstance(value, list):
            if not value:
                raise ValueError("is empty; list GPU indices (e.g. [0]) or write auto")
            if len(set(value)) != len(value):
                raise ValueError(f"lists a GPU twice: {value}")
        return value

    @field_validator("replicas")
    @classmethod
    def _replica_lists(cls, value: int | list[list[int]]) -> int | list[list[int]]:
        if isinstance(value, list):
            if not value:
                raise ValueError("is an empty list; give a count or one GPU list per replica")
            for i, gpus in enumerate(value):
                if not gpus:
                    raise located(str(i), "is an empty GPU list")
                if len(set(gpus)) != len(gpus):
                    raise located(str(i), f"lists a GPU twice: {gpus}")
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_plan_flags(cls, value: list[str]) -> list[str]:
        for i, arg in enumerate(value):
            flag = arg.split("=", 1)[0]
            if flag.startswith("--"):
                flag = flag.replace("_", "-")
            key = PLAN_FLAGS.get(flag)
            if key is not None and key.startswith("nothing ("):  # no key controls it: say why not
                raise located(
                    str(i), f"{flag} is set by the launch plan, and no models.yaml key changes it: {key[9:-1]}"
                )
            if key is not None:
                raise located(str(i), f"{flag} is set by the launch plan; use the models.yaml key {key} instead")
        return value

    @field_validator("env")
    @classmethod
    def _no_plan_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            key = PLAN_ENV.get(name)
            if key is not None:
                raise located(name, f"{name} is set by the launch plan; use the models.yaml key {key} instead")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if isinstance(self.replicas, list) and self.gpus != "auto":
            raise located("replicas", "is a list of GPU lists, so gpus must be auto (remove gpus)")
        if self.ubatch_size is not None and self.batch_size is not None and self.ubatch_size > self.batch_size:
            raise located("ubatch_size", f"is larger than batch_size ({self.batch_size}); llama.cpp would cut it")
        return self


class Config(_Strict):
    """The whole models.yaml. ``path`` is the file it came from (set by ``load_config``)."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    build: BuildConfig = Field(default_factory=BuildConfig)
    models: list[ModelConfig] = Field(default_factory=list, description="the models to serve")
    models_dirs: list[str] = Field(default_factory=list, description="folders whose GGUFs become on-demand models")
    peers: list[PeerConfig] = Field(default_factory=list, description="other endpoints serving models for us")
    path: SkipJsonSchema[Path | None] = Field(None, exclude=True)

    _lines: Lines = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _unique_names(self) -> Config:
        if not self.models and not self.models_dirs:
            raise located("models", "is empty; list at least one model, or folders of GGUFs in models_dirs")
        seen: dict[str, str] = {}
        for i, model in enumerate(self.models):
            for at, label, value in [(f"models/{i}/name", f"models[{i}].name", model.name)] + [
                (f"models/{i}/aliases/{j}", f"models[{i}].aliases[{j}]", alias) for j, alias in enumerate(model.aliases)
            ]:
                if value in seen:
                    raise located(at, f"{value!r} is already used by {seen[value]}; {UNIQUE_MSG}")
                seen[value] = label
        peers = [p.name for p in self.peers]
        for i, peer in enumerate(peers):
            if peer in peers[:i]:
                raise located(f"peers/{i}/name", f"{peer!r} is used by two peers; give each a name of its own")
        default = self.server.default_model
        if default is not None and default not in seen and not self.models_dirs:
            raise located("server/default_model", f"{default!r} is not a model; names: {', '.join(seen)}")
        for i, model in enumerate(self.models):
            if model.spillover is not None and model.spillover.peer not in peers:
                known = ", ".join(peers) or "none is configured"
                raise located(f"models/{i}/spillover/peer", f"{model.spillover.peer!r} is not a peer ({known})")
        return self

    def set_lines(self, lines: Lines) -> None:
        """Remember the line of every key path (from the loader), for ``where``."""
        self._lines = lines

    @property
    def config_dir(self) -> Path:
        """Directory that relative paths in the file resolve against (cwd for in-code configs)."""
        return self.path.parent if self.path is not None else Path.cwd()

    def model(self, name: str) -> ModelConfig:
        """The model called ``name`` or carrying it as an alias. Raises ``KeyError``."""
        for model in self.models:
            if model.name == name or name in model.aliases:
                return model
        raise KeyError(name)

    def where(self, *loc: str | int) -> str:
        """``"models.yaml:14: models[0].path"`` for a key path, for messages raised after loading."""
        key = format_loc(loc)
        if self.path is None:
            return key
        line = nearest_line(self._lines, tuple(loc))
        return f"{self.path}:{line}: {key}" if line else f"{self.path}: {key}"


# --------------------------------------------------------------------------- schema


#: Section models by the name a user knows them by ("`x` belongs under server.timeouts").
SECTION_NAMES: dict[type[BaseModel], str] = {
    ServerConfig: "server",
    Timeouts: "server.timeouts",
    BuildConfig: "build",
    ModelConfig: "a model entry (models[i])",
    SpeculativeConfig: "models[i].speculative",
    PeerConfig: "a peer entry (peers[i])",
    SpilloverConfig: "models[i].spillover",
}


def json_schema() -> dict[str, Any]:
    """The JSON schema of models.yaml (draft 2020-12), as committed in ``data/models.schema.json``."""
    schema = Config.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "orchestrator models.yaml"
    return schema


def schema_text() -> str:
    """``json_schema()`` rendered exactly as the committed file (2-space indent, trailing newline)."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def write_schema(path: Path = SCHEMA_FILE) -> Path:
    """Regenerate the schema file; run ``python -m orchestrator.config.schema`` after changing the models."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(schema_text(), encoding="utf-8")
    return path


if __name__ == "__main__":  # pragma: no cover
    print(write_schema(Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_FILE))
