"""The models.yaml reference as Markdown tables, generated from the JSON schema (``docs/models-yaml.md``).

One row per key, nested blocks by their dotted path (``models[].speculative.n_max``), with the type,
the default and the schema's own description, so the reference cannot drift from what ``up``
accepts: a test regenerates it and compares (``python -m orchestrator.config.reference > FILE``
rewrites it).
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.config.schema import SCHEMA_FILE

HEADER = """# models.yaml reference

Generated from `orchestrator/data/models.schema.json` (`python -m orchestrator.config.reference >
docs/models-yaml.md`); `tests/test_docs.py` fails when the two differ. `models.yaml`
carries a `$schema` line, so editors validate it as you type; `orchestrator up` reports any mistake
with its file, line and key. The lifecycle keys (`load`, `ttl`, `pinned`, `queue_limit`,
`server.memory_reserve`, `server.memory_budget`) are explained in [operations](operations.md), the
draft length in [draft-length](draft-length.md), peers and RPC workers in
[operations](operations.md#beyond-one-machine), the repair policy in [agents](agents.md).
"""


def _type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        return "block"
    if "anyOf" in prop:
        return " or ".join(_type(p, defs) for p in prop["anyOf"])
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}), defs)}"
    return str(kind)


def _ref(prop: dict[str, Any]) -> str | None:
    """The ``$defs`` name a property's block is (directly, in a list, or optional)."""
    for p in [prop, prop.get("items", {}), *prop.get("anyOf", [])]:
        if isinstance(p, dict):
            if "$ref" in p:
                return str(p["$ref"]).rsplit("/", 1)[-1]
            if isinstance(p.get("items"), dict) and "$ref" in p["items"]:
                return str(p["items"]["$ref"]).rsplit("/", 1)[-1]
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rows(props: dict[str, Any], defs: dict[str, Any], prefix: str, out: list[str], nested: list[Any]) -> None:
    for name, prop in props.items():
        path = f"{prefix}{name}"
        ref = _ref(prop)
        many = prop.get("type") == "array" or any(p.get("type") == "array" for p in prop.get("anyOf", []))
        default = json.dumps(prop["default"]) if "default" in prop else ""
        desc = prop.get("description") or (defs[ref].get("description", "") if ref else "")
        out.append(f"| `{path}` | {_cell(_type(prop, defs))} | {_cell(default)} | {_cell(desc)} |")
        if ref and "properties" in defs[ref]:
            nested.append((f"{path}[]." if many else f"{path}.", defs[ref]))


def reference() -> str:
    """The whole reference page."""
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    defs = schema["$defs"]
    parts = [HEADER]
    queue: list[Any] = [("", schema)]
    while queue:
        prefix, block = queue.pop(0)
        rows: list[str] = []
        nested: list[Any] = []
        _rows(block["properties"], defs, prefix, rows, nested)
        title = prefix.rstrip(".") or "top level"
        parts.append(f"\n## {title}\n\n| key | type | default | what |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
        queue.extend(nested)
    return "".join(parts)


if __name__ == "__main__":
    print(reference(), end="")
