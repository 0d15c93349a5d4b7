"""models.yaml: the pydantic model, the loader, and located error messages.

``load_config(path)`` reads the file with ruamel.yaml's round-trip loader (so every key
keeps its line number), validates it with pydantic (``extra="forbid"`` everywhere) and
turns every validation problem into one line that says where and what::

    models.yaml:14: models[0].speculative.n_min: must be <= n_max (3)

followed by what to do. Several problems become several lines of one ``ConfigError``
(a ``UserError``). The JSON schema in ``orchestrator/data/models.schema.json`` is
generated from these classes (``python -m orchestrator.config`` rewrites it; a test
checks that it is current), so editors with yaml-language-server validate as you type.

Rules beyond the types:
- ``speculative.n_min`` must be <= ``n_max``; setting ``n_max``/``n_min``/``p_min``/``draft``
  together with ``type: none`` is an error (the flags only work together; case S03).
- ``type: mtp`` (the fork / model-card spelling) is accepted and normalised to ``draft-mtp``.
- Model names and aliases are unique across the file.
- ``extra_args`` may not carry a flag the launch plan sets itself (``-m``, ``--port``,
  ``--host``, ``--spec-type``, ...): it would fight the plan, so the error names the key to use.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from orchestrator.errors import UserError

SCHEMA_FILE = Path(__file__).parent / "data" / "models.schema.json"
SCHEMA_COMMENT = "# yaml-language-server: $schema=./orchestrator/data/models.schema.json"

#: ``path:`` values that name a model the orchestrator generates itself.
BUILTIN_MODELS = ("builtin:tiny-mtp",)

# llama.cpp's `-m FILE-00001-of-00003.gguf` loads every part; see src/llama-model-loader.cpp.
_SPLIT_RE = re.compile(r"^(?P<prefix>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")

# Flags the launch plan sets itself, and the models.yaml key that controls each one.
# Spellings from common/arg.cpp of the pin. llama.cpp turns '_' into '-' in `--` flags.
PLAN_FLAGS: dict[str, str] = {
    "-m": "path",
    "--model": "path",
    "-a": "aliases (the plan passes --alias <name>)",
    "--alias": "aliases (the plan passes --alias <name>)",
    "--host": "server.host (children always bind 127.0.0.1)",
    "--port": "port",
    "-c": "ctx_size",
    "--ctx-size": "ctx_size",
    "-np": "parallel",
    "--parallel": "parallel",
    "-t": "threads",
    "--threads": "threads",
    "-ngl": "gpu_layers",
    "--gpu-layers": "gpu_layers",
    "--n-gpu-layers": "gpu_layers",
    "-ts": "gpus (several GPUs in one list = --tensor-split)",
    "--tensor-split": "gpus (several GPUs in one list = --tensor-split)",
    "--spec-type": "speculative.type",
    "--spec-draft-n-max": "speculative.n_max",
    "--spec-draft-n-min": "speculative.n_min",
    "--spec-draft-p-min": "speculative.p_min",
    "--draft-p-min": "speculative.p_min",
    "--draft-max": "speculative.n_max",
    "--draft-min": "speculative.n_min",
    "--draft-n-min": "speculative.n_min",
    "--draft-n": "speculative.n_max",
    "--spec-draft-model": "speculative.draft",
    "-md": "speculative.draft",
    "--model-draft": "speculative.draft",
    "--metrics": "nothing (the plan always passes --metrics)",
}

# Child environment variables that would override the plan (llama.cpp reads LLAMA_ARG_*).
PLAN_ENV: dict[str, str] = {
    "CUDA_VISIBLE_DEVICES": "gpus",
    "CUDA_DEVICE_ORDER": "gpus",
    "LLAMA_ARG_MODEL": "path",
    "LLAMA_ARG_HOST": "server.host",
    "LLAMA_ARG_PORT": "port",
    "LLAMA_ARG_SPEC_TYPE": "speculative.type",
    "LLAMA_ARG_SPEC_DRAFT_N_MAX": "speculative.n_max",
    "LLAMA_ARG_SPEC_DRAFT_N_MIN": "speculative.n_min",
    "LLAMA_ARG_SPEC_DRAFT_P_MIN": "speculative.p_min",
    "LLAMA_ARG_SPEC_DRAFT_MODEL": "speculative.draft",
}


def _located(at: str, message: str) -> PydanticCustomError:
    """A validation error for the key ``at`` (``/``-separated, relative to the validated object).

    Model validators are located at the model; ``at`` lets them point at the exact key.
    """
    return PydanticCustomError("orchestrator", message.replace("{", "(").replace("}", ")"), {"at": at})


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
                    raise _located(key, f"should be a number, not a boolean (got {str(value).lower()})")
        return data


class Timeouts(_Strict):
    """Timeouts in seconds."""

    connect: float = Field(10, gt=0, description="proxy -> upstream TCP connect (s)")
    first_byte: float = Field(600, gt=0, description="proxy -> upstream: wait for the first response byte (s)")
    idle: float = Field(120, gt=0, description="proxy -> upstream: longest silence inside a response (s)")
    load: float = Field(
        600, gt=0, description="supervisor: /health must answer 200 within this (s); extended while the child logs"
    )
    queue: float = Field(300, gt=0, description="proxy: how long a request waits for a ready replica (s)")
    shutdown_grace: float = Field(10, ge=0, description="in-flight requests get this long on SIGINT/SIGTERM (s)")


class ServerConfig(_Strict):
    """The orchestrator's own OpenAI-compatible endpoint."""

    host: str = Field("127.0.0.1", description="address the proxy binds; children always bind 127.0.0.1")
    port: int = Field(8080, ge=0, le=65535, description="port the proxy binds (0 = OS-picked)")
    api_keys: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="Bearer tokens; empty = no auth"
    )
    auth_health: bool = Field(False, description="require the key on /health")
    auth_metrics: bool = Field(False, description="require the key on /metrics")
    cors_origins: list[str] = Field(default_factory=list, description="CORS off when empty")
    max_body_bytes: int = Field(32 * 1024 * 1024, gt=0, description="largest request body (bytes)")
    when_loading: Literal["hold", "reject"] = Field(
        "hold", description="requests while no replica is ready: hold (up to timeouts.queue) or 503 + Retry-After"
    )
    timeouts: Timeouts = Field(default_factory=Timeouts)


class BuildConfig(_Strict):
    """Native build defaults for ``orchestrator build``."""

    backend: Literal["auto", "cpu", "cuda"] = "auto"
    cuda_arch: str | None = Field(None, description="CUDA compute capabilities, e.g. '120' or '89;90'")


def _normalise_spec_type(value: Any) -> Any:
    # Forks and model cards spell it `--spec-type mtp`; the pin only knows draft-mtp.
    if isinstance(value, str) and value.strip().lower() in ("mtp", "draft_mtp", "draft-mtp"):
        return "draft-mtp"
    return value


SpecType = Annotated[
    Literal["draft-mtp", "none"] | None,
    BeforeValidator(_normalise_spec_type),
    WithJsonSchema(
        {
            "anyOf": [{"enum": ["draft-mtp", "mtp", "none"], "type": "string"}, {"type": "null"}],
            "description": "draft-mtp (alias: mtp), none, or null/absent = auto: draft-mtp iff the GGUF "
            "has a NextN/MTP head or `draft` is set",
        }
    ),
]


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

    @model_validator(mode="after")
    def _flags_together(self) -> SpeculativeConfig:
        if self.type == "none":
            for key in ("n_max", "n_min", "p_min", "draft"):
                if key in self.model_fields_set:
                    raise _located(key, f"is set but speculative.type is none; remove {key} or set type: draft-mtp")
        if self.n_min > self.n_max:
            raise _located("n_min", f"must be <= n_max ({self.n_max})")
        return self


class ModelConfig(_Strict):
    """One model: one llama-server process per replica."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="the model id clients send; also the llama-server --alias",
    )
    path: str = Field(
        min_length=1,
        description="GGUF file (first part of a split model), relative to this file; "
        "'builtin:tiny-mtp' = the generated demo model",
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
    ctx_size: int = Field(4096, ge=1, description="context length per server (tokens), shared by its slots (-c)")
    gpu_layers: Annotated[int, Field(ge=0)] | Literal["all"] = Field("all", description="layers offloaded (-ngl)")
    parallel: int = Field(1, ge=1, description="slots per server (-np)")
    threads: int | None = Field(None, ge=1, description="CPU threads (-t); default: llama.cpp's choice")
    port: int | None = Field(
        None, ge=0, le=65535, description="fixed port for replica 0 (+i for replica i); null/0 = OS-picked"
    )
    extra_args: list[str] = Field(default_factory=list, description="more llama-server flags, e.g. ['-fa', 'on']")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for the llama-server process")
    speculative: SpeculativeConfig = Field(default_factory=SpeculativeConfig)
    system_messages: Literal["merge", "to_user"] = Field(
        "merge", description="system messages after the first: merge into the first, or turn into user turns"
    )
    multimodal: bool = Field(False, description="accept image content (needs --mmproj in extra_args; MTP is text-only)")
    thinking: bool | None = Field(None, description="default enable_thinking for this model; null = the template's")
    on_reasoning_only: Literal["pass", "retry_without_thinking"] = "pass"

    @field_validator("path")
    @classmethod
    def _builtin_known(cls, value: str) -> str:
        if value.startswith("builtin:") and value not in BUILTIN_MODELS:
            near = difflib.get_close_matches(value, BUILTIN_MODELS, n=1)
            tip = f"did you mean {near[0]!r}? " if near else ""
            raise ValueError(f"unknown builtin model {value!r}; {tip}known: {', '.join(BUILTIN_MODELS)}")
        return value

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
                    raise _located(str(i), "is an empty GPU list")
                if len(set(gpus)) != len(gpus):
                    raise _located(str(i), f"lists a GPU twice: {gpus}")
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_plan_flags(cls, value: list[str]) -> list[str]:
        for i, arg in enumerate(value):
            flag = arg.split("=", 1)[0]
            if flag.startswith("--"):
                flag = flag.replace("_", "-")
            key = PLAN_FLAGS.get(flag)
            if key is not None:
                raise _located(str(i), f"{flag} is set by the launch plan; use the models.yaml key {key} instead")
        return value

    @field_validator("env")
    @classmethod
    def _no_plan_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            key = PLAN_ENV.get(name)
            if key is not None:
                raise _located(name, f"{name} is set by the launch plan; use the models.yaml key {key} instead")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if isinstance(self.replicas, list) and self.gpus != "auto":
            raise _located("replicas", "is a list of GPU lists, so gpus must be auto (remove gpus)")
        if self.multimodal and self.speculative.type == "draft-mtp":
            raise _located(
                "speculative/type",
                "is draft-mtp but multimodal is true; MTP does not work with --mmproj yet: "
                "set speculative.type: none or multimodal: false",
            )
        return self


_UNIQUE_MSG = "model names and aliases must be unique"


class Config(_Strict):
    """The whole models.yaml. ``path`` is the file it came from (set by ``load_config``)."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    build: BuildConfig = Field(default_factory=BuildConfig)
    models: list[ModelConfig] = Field(min_length=1, description="the models to serve")
    path: SkipJsonSchema[Path | None] = Field(None, exclude=True)

    _lines: dict[tuple[str | int, ...], int] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _unique_names(self) -> Config:
        seen: dict[str, str] = {}
        for i, model in enumerate(self.models):
            for at, label, value in [(f"models/{i}/name", f"models[{i}].name", model.name)] + [
                (f"models/{i}/aliases/{j}", f"models[{i}].aliases[{j}]", alias) for j, alias in enumerate(model.aliases)
            ]:
                if value in seen:
                    raise _located(at, f"{value!r} is already used by {seen[value]}; {_UNIQUE_MSG}")
                seen[value] = label
        return self

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
        line = _nearest_line(self._lines, tuple(loc))
        return f"{self.path}:{line}: {key}" if line else f"{self.path}: {key}"


# --------------------------------------------------------------------------- paths


def resolve_model_path(model: ModelConfig, config_dir: Path) -> Path:
    """Resolve ``model.path`` to a GGUF file (not checked for existence).

    ``builtin:tiny-mtp`` -> ``orchestrator.tiny_model.demo_model()`` (generated on first use);
    ``~`` expands; relative paths resolve against ``config_dir`` (the YAML's directory);
    a split model resolves to its first part (``-00001-of-0000N.gguf``), which llama.cpp
    needs in ``-m``.
    """
    if model.path in BUILTIN_MODELS:
        from orchestrator import tiny_model  # lazy: imports numpy/gguf

        return Path(tiny_model.demo_model())
    return resolve_file(model.path, config_dir)


def resolve_draft_path(model: ModelConfig, config_dir: Path) -> Path | None:
    """Resolve ``model.speculative.draft`` like ``resolve_model_path``; None when unset."""
    if model.speculative.draft is None:
        return None
    return resolve_file(model.speculative.draft, config_dir)


def resolve_file(text: str, config_dir: Path) -> Path:
    """Expand ``~``, anchor relative paths at ``config_dir``, map any split part to part 1."""
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = config_dir / path
    match = _SPLIT_RE.match(path.name)
    if match and match["part"] != "00001":
        path = path.with_name(f"{match['prefix']}-00001-of-{match['count']}.gguf")
    elif not match and not path.exists() and path.suffix == ".gguf":
        # `model.gguf` may be published as model-00001-of-00003.gguf
        parts = sorted(path.parent.glob(f"{path.stem}-00001-of-*.gguf")) if path.parent.is_dir() else []
        if len(parts) == 1:
            path = parts[0]
    return path


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class Problem:
    """One located config problem: ``"{file}:{line}: {key}: {message}"`` plus a hint."""

    file: str
    line: int | None
    key: str
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ConfigError(UserError):
    """models.yaml is invalid. ``problems`` holds each located problem; str() has one per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        if len(problems) == 1:
            super().__init__(str(problems[0]), problems[0].hint)
        else:
            lines = [f"{len(problems)} problems in {problems[0].file}:"]
            for p in problems:
                lines.append(f"  {p}")
                if p.hint:
                    lines.append(f"      fix: {p.hint}")
            super().__init__("\n".join(lines), "fix each key above; an editor with the YAML schema shows them as you type")


def format_loc(loc: tuple[str | int, ...] | list[str | int]) -> str:
    """``("models", 0, "speculative", "n_min")`` -> ``"models[0].speculative.n_min"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def load_config(path: Path) -> Config:
    """Read and validate a models.yaml.

    Args:
        path: the YAML file.
    Returns:
        the validated ``Config`` with ``config.path`` set to ``path``.
    Raises:
        ConfigError (a UserError): missing/empty file, YAML syntax error (with line), or one
        located line per validation problem (file:line: key path: what, plus the fix).
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    name = str(path)
    if not path.exists():
        raise ConfigError(
            [Problem(name, None, "", "no such file", "create it (the repository's models.yaml is an example) or pass --config PATH")]
        )
    if path.is_dir():
        raise ConfigError([Problem(name, None, "", "is a directory, not a YAML file", "pass --config path/to/models.yaml")])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError([Problem(name, None, "", f"cannot read: {err}", "check the file's permissions and encoding (UTF-8)")]) from None
    yaml = YAML(typ="rt")
    try:
        data = yaml.load(text)
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        what = " ".join(x for x in (err.context, err.problem) if x)
        raise ConfigError([Problem(name, line, "", f"YAML syntax error: {what}", "fix the YAML at that line (indentation, quotes, ':' after keys)")]) from None
    except YAMLError as err:
        raise ConfigError([Problem(name, None, "", f"YAML error: {err}", "fix the YAML syntax")]) from None
    except RecursionError:
        raise ConfigError([Problem(name, None, "", "YAML nested too deeply to read", "a models.yaml needs only a few levels")]) from None
    if data is None:
        raise ConfigError(
            [Problem(name, None, "", "is empty", "add a `models:` list, e.g. `models: [{name: demo, path: 'builtin:tiny-mtp'}]`")]
        )
    if not isinstance(data, dict):
        raise ConfigError(
            [Problem(name, 1, "", f"the top level must be a mapping with a `models:` key, not a {_yaml_kind(data)}", "start the file with `models:`")]
        )
    try:
        lines = _collect_lines(data)
        plain = _plain(data)
    except RecursionError:
        raise ConfigError([Problem(name, None, "", "YAML nested too deeply to read", "a models.yaml needs only a few levels")]) from None
    problems: list[Problem] = []
    if "path" in plain:
        problems.append(_problem_unknown(name, lines, ("path",), Config))
        del plain["path"]
    try:
        config = Config.model_validate(plain)
    except ValidationError as err:
        problems.extend(_problems(name, lines, err, plain))
        raise ConfigError(_dedupe(problems)) from None
    if problems:
        raise ConfigError(problems)
    config.path = path
    config._lines = lines
    return config


def _yaml_kind(node: Any) -> str:
    """``"list"``, ``"string"``, ... for a loaded YAML node (ruamel's class names mean nothing to users)."""
    if isinstance(node, list):
        return "list"
    if isinstance(node, str):
        return f"string ({str(node)[:40]!r})"
    if isinstance(node, bool) or type(node).__name__ == "ScalarBoolean":
        return "boolean"
    if isinstance(node, (int, float)):
        return "number"
    return type(node).__name__


def _plain(node: Any) -> Any:
    """ruamel round-trip nodes -> plain dict/list/str/int/float/bool for pydantic."""
    if isinstance(node, dict):
        return {str(k) if not isinstance(k, (int, float, bool)) or k is None else k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    # ScalarBoolean subclasses int and keeps its truth value
    if type(node).__name__ == "ScalarBoolean":
        return bool(node)
    for base in (str, int, float):
        if isinstance(node, base):
            return base(node)
    return node


def _collect_lines(data: Any) -> dict[tuple[str | int, ...], int]:
    """Map every key path to its 1-based line (mapping keys via ``lc.key``, items via ``lc.item``)."""
    out: dict[tuple[str | int, ...], int] = {}

    def walk(node: Any, loc: tuple[str | int, ...]) -> None:
        lc = getattr(node, "lc", None)
        if isinstance(node, dict):
            for k, v in node.items():
                sub = loc + (str(k),)
                if lc is not None:
                    try:
                        out[sub] = lc.key(k)[0] + 1
                    except (KeyError, TypeError):
                        pass
                walk(v, sub)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                sub = loc + (i,)
                if lc is not None:
                    try:
                        out[sub] = lc.item(i)[0] + 1
                    except (KeyError, TypeError, IndexError):
                        pass
                walk(v, sub)

    walk(data, ())
    return out


def _nearest_line(lines: dict[tuple[str | int, ...], int], loc: tuple[str | int, ...]) -> int | None:
    """Line of ``loc`` or of its nearest ancestor present in the file (1 for the top level)."""
    for n in range(len(loc), 0, -1):
        line = lines.get(tuple(loc[:n]))
        if line is not None:
            return line
    return 1 if lines else None


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the last key of ``loc`` (for 'allowed keys' lists)."""
    cls: type[BaseModel] = Config
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = cls.model_fields.get(part)
        if field is None:
            return None
        sub = _find_model(field.annotation)
        if sub is None:
            return None
        cls = sub
    return cls


def _find_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _find_model(arg)
        if found is not None:
            return found
    return None


_SECTION_NAMES: dict[type[BaseModel], str] = {
    ServerConfig: "server",
    Timeouts: "server.timeouts",
    BuildConfig: "build",
    ModelConfig: "a model entry (models[i])",
    SpeculativeConfig: "models[i].speculative",
}


def _section_of(key: str) -> type[BaseModel] | None:
    for cls in _SECTION_NAMES:
        if key in cls.model_fields:
            return cls
    return None


def _problem_unknown(name: str, lines: dict[tuple[str | int, ...], int], loc: tuple[str | int, ...], cls: type[BaseModel] | None) -> Problem:
    key = str(loc[-1])
    allowed = [k for k, f in cls.model_fields.items() if not f.exclude] if cls is not None else []
    near = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"did you mean `{near[0]}`? " if near else ""
    home = _section_of(key)
    if not near and home is not None and home is not cls:
        hint = f"`{key}` belongs under {_SECTION_NAMES[home]}; "
    if allowed:
        hint += "allowed here: " + ", ".join(allowed)
    return Problem(name, _nearest_line(lines, loc), format_loc(loc), f"unknown key `{key}`", hint or None)


_HINTS: dict[tuple[str, ...], str] = {
    ("speculative", "n_min"): "lower n_min or raise n_max",
    ("models",): "add at least one model: `- {name: demo, path: 'builtin:tiny-mtp'}`",
    ("name",): "use letters, digits, '.', '_' and '-' (it becomes the model id and instance name)",
    ("path",): "give a .gguf path (relative to this file) or 'builtin:tiny-mtp'",
    ("gpus",): "write `auto` or a list of GPU indices such as [0] or [0, 1]",
    ("replicas",): "write a count such as 2, or one GPU list per replica such as [[0], [1]]",
    ("port",): "pick a port between 1 and 65535, or leave it out for an OS-picked one",
}


def _problems(name: str, lines: dict[tuple[str | int, ...], int], err: ValidationError, data: Any) -> list[Problem]:
    """One ``Problem`` per pydantic error; union branches collapse into the branch that matched."""
    grouped: dict[tuple[str | int, ...], list[tuple[tuple[str | int, ...], dict[str, Any]]]] = {}
    order: list[tuple[str | int, ...]] = []
    for e in err.errors(include_url=False):
        loc, tail = _split_union_loc(tuple(e["loc"]), data)
        ctx = e.get("ctx") or {}
        if e["type"] == "orchestrator" and ctx.get("at"):
            loc = loc + tuple(int(p) if p.isdigit() else p for p in str(ctx["at"]).split("/"))
        if loc not in grouped:
            grouped[loc] = []
            order.append(loc)
        grouped[loc].append((tail, e))
    problems: list[Problem] = []
    for loc in order:
        entries = grouped[loc]
        deep = [(t, e) for t, e in entries if len(t) > 1]
        if deep:
            # the input had the container type of that branch: report inside it
            for tail, e in deep:
                problems.append(_one(name, lines, loc + tail[1:], e))
            continue
        if len(entries) == 1:
            problems.append(_one(name, lines, loc, entries[0][1]))
            continue
        msgs = []
        for _, e in entries:
            m = _clean_msg(e)
            if m not in msgs:
                msgs.append(m)
        got = entries[0][1].get("input")
        problems.append(
            Problem(name, _nearest_line(lines, loc), format_loc(loc), " or ".join(msgs) + f" (got {got!r})", _hint_for(loc))
        )
    return problems


def _split_union_loc(loc: tuple[str | int, ...], data: Any) -> tuple[tuple[str | int, ...], tuple[str | int, ...]]:
    """Cut pydantic's union tags (e.g. ``'list[int]'``) out of a loc: (key path, (tag, rest...))."""
    node = data
    for i, part in enumerate(loc):
        if isinstance(part, int):
            if isinstance(node, list) and 0 <= part < len(node):
                node = node[part]
                continue
            return loc[:i], loc[i:]
        if isinstance(node, dict):
            if part in node:
                node = node[part]
                continue
            # a missing or unknown key: the loc ends here
            if i == len(loc) - 1:
                return loc, ()
            return loc[:i], loc[i:]
        return loc[:i], loc[i:]
    return loc, ()


def _clean_msg(e: dict[str, Any]) -> str:
    msg = str(e["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    msg = re.sub(r"^(Input|String|List|Dictionary|Value|Tuple|Object) should", "should", msg)
    msg = msg.replace(" after validation", "")
    return msg[:1].lower() + msg[1:] if msg[:2] != msg[:2].upper() else msg


def _hint_for(loc: tuple[str | int, ...]) -> str | None:
    keys = tuple(p for p in loc if isinstance(p, str))
    for n in range(len(keys), 0, -1):
        hint = _HINTS.get(keys[-n:]) if n <= len(keys) else None
        if hint:
            return hint
    return None


def _one(name: str, lines: dict[tuple[str | int, ...], int], loc: tuple[str | int, ...], e: dict[str, Any]) -> Problem:
    kind = e["type"]
    if kind == "extra_forbidden":
        return _problem_unknown(name, lines, loc, _model_at(loc))
    if kind == "missing":
        parent = loc[:-1]
        return Problem(
            name, _nearest_line(lines, parent), format_loc(loc), "required key missing", _hint_for(loc) or f"add `{loc[-1]}:`"
        )
    msg = _clean_msg(e)
    hint = _hint_for(loc)
    if kind == "orchestrator" and _UNIQUE_MSG in msg:
        hint = "rename one of them or drop the duplicate alias"
    if kind == "literal_error" and isinstance(e.get("input"), str):
        expected = re.findall(r"'([^']*)'", str(e.get("ctx", {}).get("expected", "")))
        near = difflib.get_close_matches(e["input"], expected, n=1)
        if near:
            hint = f"did you mean {near[0]!r}?"
    if kind not in ("orchestrator", "value_error") and "input" in e and not isinstance(e["input"], (dict, list)):
        msg += f" (got {e['input']!r})"
    return Problem(name, _nearest_line(lines, loc), format_loc(loc), msg, hint)


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for p in problems:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out


# --------------------------------------------------------------------------- schema


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
    """Regenerate the schema file; run ``python -m orchestrator.config`` after changing the models."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(schema_text(), encoding="utf-8")
    return path


if __name__ == "__main__":  # pragma: no cover
    print(write_schema(Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_FILE))


__all__ = [
    "BUILTIN_MODELS",
    "BuildConfig",
    "Config",
    "ConfigError",
    "ModelConfig",
    "Problem",
    "ServerConfig",
    "SpeculativeConfig",
    "Timeouts",
    "format_loc",
    "json_schema",
    "load_config",
    "resolve_draft_path",
    "resolve_file",
    "resolve_model_path",
    "write_schema",
]
