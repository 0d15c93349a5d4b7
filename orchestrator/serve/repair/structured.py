"""Structured output: every ``response_format`` form is honoured or refused, never silently dropped.

Pure functions, no I/O. What llama-server does at the pin (``oaicompat_chat_params_parse`` in
``tools/server/server-common.cpp``, the ``json_schema``/``grammar`` fields in ``server-schema.cpp``):

- chat: ``{"type": "text"}``; ``{"type": "json_object"}`` (any object) and its ``"schema"`` extension
  (llama-server's README); ``{"type": "json_schema", "json_schema": {"schema": ...}}``. Another type
  is a 400 there. But a ``response_format`` that is not an object, has no ``type``, or is a
  ``json_schema`` without a schema is accepted and generates unconstrained (or any-object) output;
- ``/v1/completions`` and ``/infill`` read only the native ``json_schema`` and ``grammar`` fields:
  ``response_format`` is ignored there;
- a schema its converter cannot turn into a grammar (an unknown ``type``, a remote ``$ref``) is an
  HTTP 500 there, and ``json_schema`` with ``grammar`` a 500 too.

So :func:`check` refuses the silent cases with a 400 naming the field, :func:`to_native` maps
``response_format`` onto ``json_schema`` for the completion routes, and :func:`schema_error` turns
llama-server's 500 for a request that carries a schema into a 400 naming the schema's field.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ApiError

TYPES = ("text", "json_object", "json_schema")


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def check(body: dict[str, Any]) -> None:
    """Validate ``response_format``, ``json_schema`` and ``grammar`` of a chat or completion body.

    Raises:
        ApiError: 400 naming ``response_format``, ``response_format.type``,
            ``response_format.json_schema.schema``, ``response_format.schema``, ``json_schema`` or
            ``grammar``, for a form llama-server would ignore or misread.
    """
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, dict):
            raise _bad("response_format must be an object such as {'type': 'json_object'}", "response_format")
        ftype = fmt.get("type")
        if ftype not in TYPES:
            raise _bad(
                f"response_format.type must be one of {', '.join(TYPES)} (got {ftype!r})", "response_format.type"
            )
        if ftype == "json_schema":
            wrapper = fmt.get("json_schema")
            schema = wrapper.get("schema") if isinstance(wrapper, dict) else None
            if not isinstance(schema, dict):
                raise _bad(
                    "response_format.json_schema.schema must be a JSON schema object for type json_schema",
                    "response_format.json_schema.schema",
                )
        if ftype == "json_object" and "schema" in fmt and not isinstance(fmt["schema"], dict):
            raise _bad("response_format.schema must be a JSON schema object", "response_format.schema")
    schema = body.get("json_schema")
    if schema is not None and not isinstance(schema, dict):
        raise _bad("json_schema must be a JSON schema object", "json_schema")
    grammar = body.get("grammar")
    if grammar is not None and not isinstance(grammar, str):
        raise _bad("grammar must be a GBNF grammar string", "grammar")
    if grammar and (schema is not None or (isinstance(fmt, dict) and fmt.get("type") != "text")):
        raise _bad("send either a grammar or a JSON schema (response_format/json_schema), not both", "grammar")
    _check_satisfiable(body)


def _check_satisfiable(body: dict[str, Any]) -> None:
    """400 naming the path of a schema no value can match (llama-server's converter drops ``not`` and
    ran the answer unconstrained: a 200 that ignored the schema), the output's or a tool's."""
    param = schema_param(body)
    fmt = body.get("response_format")
    schema = body.get("json_schema") if param == "json_schema" else None
    if isinstance(fmt, dict) and param is not None and param.startswith("response_format"):
        schema = format_schema(fmt)
    schemas = [(param, schema)] if param is not None else []
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":  # Responses' structured output
        schemas.append(("text.format.schema", fmt.get("schema")))
    for where, value in [*schemas, *tool_schemas(body.get("tools"))]:
        bad = unsatisfiable(value, where or "")
        if bad is not None:
            raise ApiError(
                400,
                f"{bad}: no value can match this schema, so no answer can follow it",
                param=bad,
                code="invalid_schema",
            )


def tool_schemas(tools: Any) -> list[tuple[str, Any]]:
    """Each tool's parameter schema with its path, in any API's spelling: chat's
    ``function.parameters``, Responses' ``parameters``, Anthropic's ``input_schema``."""
    return _tool_schemas(tools, "tools")


def _tool_schemas(tools: Any, where: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function")
        if isinstance(fn, dict):
            out.append((f"{where}[{i}].function.parameters", fn.get("parameters")))
        for key in ("parameters", "input_schema"):
            if key in tool:
                out.append((f"{where}[{i}].{key}", tool[key]))
        if tool.get("type") == "namespace":  # Codex's tool groups: their functions, one level down
            out += _tool_schemas(tool.get("tools"), f"{where}[{i}].tools")
    return out


def check_tools(body: dict[str, Any]) -> None:
    """400 naming the path of a tool schema no value can match (a route without ``check``).

    Raises:
        ApiError: 400 ``invalid_schema`` naming ``tools[i]....``.
    """
    for where, value in tool_schemas(body.get("tools")):
        bad = unsatisfiable(value, where)
        if bad is not None:
            raise ApiError(
                400,
                f"{bad}: no value can match this schema, so no tool call can follow it",
                param=bad,
                code="invalid_schema",
            )


def unsatisfiable(schema: Any, path: str) -> str | None:
    """The path of a part of ``schema`` that no value can match and that every value must (the
    root, ``allOf`` members, required properties), or None. Found: ``false``, ``{"not": {}}``,
    ``{"not": true}``, an empty ``enum`` or ``type`` list, and ``allOf`` members whose ``type``s
    share no JSON type with each other or the schema's own (``string`` and ``integer``: the
    converter ran such a schema unconstrained, a 200 that ignored it); the path then names the
    first member that leaves no type."""
    if schema is False:
        return path
    if not isinstance(schema, dict):
        return None
    if schema.get("not") in ({}, True) or schema.get("enum") == [] or schema.get("type") == []:
        return path
    parts = schema.get("allOf")
    allowed = _own_types(schema)
    for j, part in enumerate(parts if isinstance(parts, list) else []):
        if (found := unsatisfiable(part, f"{path}.allOf[{j}]")) is not None:
            return found
        allowed = _meet(allowed, _types(part))
        if allowed is not None and not allowed:
            return f"{path}.allOf[{j}]"
    props, required = schema.get("properties"), schema.get("required")
    if isinstance(props, dict) and isinstance(required, list):
        for name in required:
            if isinstance(name, str) and (found := unsatisfiable(props.get(name), f"{path}.properties.{name}")):
                return found
    return None


#: JSON Schema's type names; ``number`` is ``integer`` or ``fraction`` (any other number), so that
#: ``integer`` and ``number`` meet in ``integer``
_TYPE_SETS = {
    "null": frozenset({"null"}),
    "boolean": frozenset({"boolean"}),
    "object": frozenset({"object"}),
    "array": frozenset({"array"}),
    "string": frozenset({"string"}),
    "integer": frozenset({"integer"}),
    "number": frozenset({"integer", "fraction"}),
}


def _own_types(schema: dict[str, Any]) -> frozenset[str] | None:
    """The JSON types a schema's own ``type`` allows; None for any (no ``type``, or one we do not
    know: llama-server's converter refuses that itself)."""
    names = schema.get("type")
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not all(isinstance(n, str) and n in _TYPE_SETS for n in names):
        return None
    return frozenset().union(*(_TYPE_SETS[n] for n in names))


def _types(schema: Any) -> frozenset[str] | None:
    """The JSON types every value of ``schema`` has: its own ``type`` met with its ``allOf``
    members' (None for any)."""
    if not isinstance(schema, dict):
        return None
    allowed = _own_types(schema)
    parts = schema.get("allOf")
    for part in parts if isinstance(parts, list) else []:
        allowed = _meet(allowed, _types(part))
    return allowed


def _meet(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    """The types both allow (None: any)."""
    return b if a is None else a if b is None else a & b


def format_schema(fmt: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a checked ``response_format`` asks for (``{}`` = any object), or None for text."""
    ftype = fmt.get("type")
    if ftype == "json_schema":
        schema: dict[str, Any] = fmt["json_schema"]["schema"]
        return schema
    if ftype == "json_object":
        return dict(fmt.get("schema") or {})
    return None


def to_native(body: dict[str, Any]) -> dict[str, Any] | None:
    """For ``/v1/completions`` and ``/infill``: ``response_format`` as llama-server's ``json_schema``.

    Returns a new body, or None when there is no ``response_format``. Call :func:`check` first.

    Raises:
        ApiError: 400 naming ``response_format`` when ``json_schema`` is also given.
    """
    fmt = body.get("response_format")
    if fmt is None:
        return None
    if "json_schema" in body:
        raise _bad("send response_format or json_schema, not both", "response_format")
    new = {k: v for k, v in body.items() if k != "response_format"}
    schema = format_schema(fmt)
    if schema is not None:
        new["json_schema"] = schema
    return new


def schema_param(body: dict[str, Any]) -> str | None:
    """The field that carries a JSON schema in ``body``, or None when it has none."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_schema":
            return "response_format.json_schema.schema"
        if fmt.get("type") == "json_object":
            return "response_format.schema" if "schema" in fmt else "response_format"
    if body.get("json_schema") is not None:
        return "json_schema"
    return None


def schema_error(err: ApiError, body: dict[str, Any]) -> ApiError:
    """llama-server's 5xx for a body that carries a schema is a schema it cannot use: a 400.

    Args:
        err: the error made from llama-server's answer (``upstream.from_upstream_status``).
        body: the body that was sent.

    Returns:
        A 400 naming the schema field with llama-server's reason when ``err`` is a 502 (or its
        schema error already made a 400 by ``llama_fields.client_mistake``) and ``body`` carries a
        schema (a tool's schema: ``tools``) (a request that llama-server answered, so it did not crash;
        the template was repaired before, so the schema is what failed); ``err`` otherwise.
    """
    param = schema_param(body)
    grammar_failed = err.status == 400 and "failed to parse grammar" in err.message
    tools_failed = err.code == "invalid_schema" or err.param == "tools" or grammar_failed
    if tools_failed and param is None and body.get("tools"):
        # a schema llama-server could not use that is not the output's: a tool's parameters
        found = unusable_tool(body.get("tools"))
        where, why = found if found is not None else ("tools", "")
        message = f"{where}: {why}; " if why else ""
        return ApiError(400, f"{message}llama-server: {err.message}", param=where, code="invalid_schema")
    if err.status not in (502, 400) or param is None or (err.status == 400 and err.code != "invalid_schema"):
        return err
    return ApiError(
        400,
        f"the JSON schema cannot be used for constrained output: {err.message}; simplify the schema",
        param=param,
        code="invalid_schema",
    )


# JSON schema types llama-server's converter knows (common/json-schema.cpp: "unrecognized type")
SCHEMA_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
# llama.cpp's grammar parser refuses a repetition of more than this many (src/llama-grammar.cpp,
# MAX_REPETITION_THRESHOLD): a minItems or minLength above it cannot become a grammar
MAX_REPETITIONS = 2000


def unusable_tool(tools: Any) -> tuple[str, str] | None:
    """The path of the first tool schema part that llama-server cannot turn into a grammar, and why:
    a ``$ref`` outside the schema or to nothing in it, an unknown ``type``, or a ``minItems`` /
    ``minLength`` over :data:`MAX_REPETITIONS`. Used to name the tool once llama-server refused."""
    for where, schema in tool_schemas(tools):
        found = _unusable(schema, schema, where)
        if found is not None:
            return found
    return None


def _unusable(node: Any, root: Any, path: str) -> tuple[str, str] | None:
    if isinstance(node, list):
        for j, item in enumerate(node):
            if (found := _unusable(item, root, f"{path}[{j}]")) is not None:
                return found
        return None
    if not isinstance(node, dict):
        return None
    ref = node.get("$ref")
    if isinstance(ref, str) and not _resolves(ref, root):
        why = (
            "only references into the same schema (#/...) can be used"
            if not ref.startswith("#")
            else "it names nothing"
        )
        return f"{path}.$ref", f"$ref {ref!r}: {why}"
    types = node.get("type")
    for name in types if isinstance(types, list) else [types] if isinstance(types, str) else []:
        if name not in SCHEMA_TYPES:
            return f"{path}.type", f"unknown type {name!r}; use one of {', '.join(SCHEMA_TYPES)}"
    for key in ("minItems", "minLength"):
        count = node.get(key)
        if isinstance(count, int) and count > MAX_REPETITIONS:
            return f"{path}.{key}", f"{key} {count} is more repetitions than a grammar allows ({MAX_REPETITIONS})"
    for key, value in node.items():
        if key not in ("enum", "const", "default", "examples") and (found := _unusable(value, root, f"{path}.{key}")):
            return found
    return None


def _resolves(ref: str, root: Any) -> bool:
    """Whether ``ref`` is a JSON pointer into ``root`` (``#``, ``#/$defs/Pet``...)."""
    if not ref.startswith("#"):
        return False
    node = root
    for part in [p.replace("~1", "/").replace("~0", "~") for p in ref[1:].split("/") if p]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True
