"""Write the content-block types the installed Claude Code can send into ``tests/data``.

Claude Code ships as one native binary whose JavaScript bundle carries its table of Messages
content-block types (an object literal ``{advisor_tool_result:!0, ..., web_search_tool_result:!0}``
followed by a list of the block types it sends beside them, ``["connector_text", ...]``). This
script reads both from the binary that ``scripts/install_agent_clients.sh`` installed and writes
``tests/data/client_surface/claude-code.json``; ``tests/serve/test_clients_this_month.py`` sends one
block of each type through the endpoint. Bumping the client and running this again shows, in the
test, which types are new.

Usage: ``python scripts/client_surface.py [--bin DIR]`` (default: the installer's bin folder).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "client_surface" / "claude-code.json"

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", type=Path, help="the agent clients' bin folder")
    args = parser.parse_args()
    binary, version = claude_binary(args.bin or installed_bin())
    OUT.parent.mkdir(parents=True, exist_ok=True)
    data = {"client": "claude-code", "version": version, "content_block_types": block_types(binary)}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{OUT.relative_to(ROOT)}: {len(data['content_block_types'])} block types of Claude Code {version}")


if __name__ == "__main__":
    main()
