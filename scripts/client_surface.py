"""Write what the installed agent clients can send (their block and item types) into ``tests/data``.

**Claude Code** ships as one native binary whose JavaScript bundle carries its table of Messages
content-block types (an object literal ``{advisor_tool_result:!0, ..., web_search_tool_result:!0}``
followed by a list of the block types it sends beside them, ``["connector_text", ...]``). This
script reads both from the binary that ``scripts/install_agent_clients.sh`` installed and writes
``tests/data/client_surface/claude-code.json``; ``tests/serve/test_clients_this_month.py`` sends one
block of each type through the endpoint. Bumping the client and running this again shows, in the
test, which types are new.

**Codex** writes the JSON schema of its own protocol types (``codex app-server
generate-json-schema``); its ``ResponseItem`` is what it replays in a Responses ``input``, with the
part types of a message, a tool output, an agent message and a reasoning item. This script runs
that command of the installed Codex and writes ``tests/data/client_surface/codex.json``, which
the same test file sends through ``/v1/responses``.

Usage: ``python scripts/client_surface.py [--bin DIR]`` (default: the installer's bin folder).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "tests" / "data" / "client_surface"
# Codex's schema name -> the key it is written under
CODEX_UNIONS = {
    "ResponseItem": "response_item_types",
    "ContentItem": "message_content_types",
    "FunctionCallOutputContentItem": "tool_output_content_types",
    "AgentMessageInputContent": "agent_message_content_types",
    "ReasoningItemContent": "reasoning_content_types",
    "ReasoningItemReasoningSummary": "reasoning_summary_types",
}

# the table: a run of `name:!0` pairs that holds both "tool_use" and "tool_result", then the extra list
_TABLE = re.compile(rb"=\{((?:[a-z_]+:!0,)+[a-z_]+:!0)\},[A-Za-z_$]{1,4}=\[((?:\"[a-z_]+\",?)+)\]")


def installed_bin() -> Path:
    """The agent clients' bin folder (the installer prints it on its last line)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install_agent_clients.sh")], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def claude_binary(bin_dir: Path) -> tuple[Path, str]:
    """The native Claude Code binary under the installer's folder, and its version."""
    root = bin_dir.parent / "node_modules" / "@anthropic-ai"
    package = json.loads((root / "claude-code" / "package.json").read_text())
    return root / "claude-code-linux-x64" / "claude", str(package["version"])


def block_types(binary: Path) -> list[str]:
    """The content-block types in the bundle's table, sorted."""
    data = binary.read_bytes()
    for match in _TABLE.finditer(data):
        names = [pair.split(b":")[0].decode() for pair in match.group(1).split(b",")]
        if "tool_use" in names and "tool_result" in names:
            extra = [name.strip('"') for name in match.group(2).decode().split(",")]
            return sorted({*names, *extra})
    raise SystemExit(f"no content-block table found in {binary}")


def codex_surface(bin_dir: Path) -> dict[str, Any]:
    """The item and part types of the installed Codex's ``ResponseItem`` (its own JSON schema)."""
    codex = bin_dir / "codex"
    version = subprocess.run([str(codex), "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    with tempfile.TemporaryDirectory() as home:  # Codex writes its config folder under HOME
        env = {**os.environ, "HOME": home, "CODEX_HOME": str(Path(home) / ".codex")}
        out = Path(home) / "schema"
        cmd = [str(codex), "app-server", "generate-json-schema", "--out", str(out)]
        subprocess.run(cmd, capture_output=True, env=env, check=True, timeout=120)
        schema = json.loads((out / "codex_app_server_protocol.v2.schemas.json").read_text())
    defs = schema["definitions"]
    data: dict[str, Any] = {"client": "codex", "version": version}
    for name, key in CODEX_UNIONS.items():
        data[key] = sorted(variant["properties"]["type"]["enum"][0] for variant in defs[name]["oneOf"])
    return data


def write(name: str, data: dict[str, Any]) -> None:
    path = OUT_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    counts = ", ".join(f"{len(v)} {k}" for k, v in data.items() if isinstance(v, list))
    print(f"{path.relative_to(ROOT)}: {data['client']} {data['version']}: {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", type=Path, help="the agent clients' bin folder")
    args = parser.parse_args()
    bin_dir = args.bin or installed_bin()
    binary, version = claude_binary(bin_dir)
    write("claude-code", {"client": "claude-code", "version": version, "content_block_types": block_types(binary)})
    write("codex", codex_surface(bin_dir))


if __name__ == "__main__":
    main()
