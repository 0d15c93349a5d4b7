"""The README is a front page and the reference lives in ``docs/``; every command, flag and
models.yaml key they show is real.

- README.md is at most 300 lines and links every page in ``docs/``;
- every ``orchestrator COMMAND [SUB] --flag`` in a code span or block of README.md and ``docs/*.md``
  names a command of the CLI and flags that command takes (read from the typer app itself);
- ``docs/models-yaml.md`` is exactly what the schema generates (``orchestrator.config.reference``),
  so every key the schema accepts is documented and no documented key is made up.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from orchestrator.cli.app import app
from orchestrator.config.reference import reference

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
SPAN = re.compile(r"`([^`\n]+)`")
CALL = re.compile(r"(?:^|[\s(;&|])orchestrator ([a-z][a-z-]*)((?:[^#|;&\n])*)")
# tools the bench subcommands run take their own flags (argparse, checked by their --help)
PASS_THROUGH = {("bench", "policy"), ("bench", "agent"), ("bench", "proxy"), ("bench", "gpu")}


def _code(text: str) -> list[str]:
    """The code on a page: each line of a fenced block, and each inline code span outside them."""
    blocks = FENCE.findall(text)
    rest = FENCE.sub("", text)
    lines = [line for block in blocks for line in block.splitlines() if not line.lstrip().startswith("#")]
    return lines + SPAN.findall(rest)


def _commands() -> dict[str, Any]:
    group = typer.main.get_command(app)
    return dict(group.commands)  # type: ignore[attr-defined]


def _flags(command: Any) -> set[str]:
    return {opt for p in command.params for opt in [*p.opts, *p.secondary_opts] if opt.startswith("-")}


def _problems(page: Path, commands: dict[str, Any]) -> list[str]:
    out = []
    for code in _code(page.read_text(encoding="utf-8")):
        for name, rest in CALL.findall(code):
            if name not in commands:
                out.append(f"{page.name}: `orchestrator {name}` is not a command ({code.strip()!r})")
                continue
            command = commands[name]
            words = rest.split()
            sub = getattr(command, "commands", None)
            if sub is not None:  # a group: `bench` runs `sweep` unless a subcommand is named
                first = words[0] if words else ""
                if (name, first) in PASS_THROUGH:
                    continue
                command = sub[first] if first in sub else sub["sweep"]
            flags = _flags(command)
            for word in words:
                flag = word.split("=")[0].rstrip(",.)`")
                if re.fullmatch(r"--?[a-z][a-z0-9-]*", flag) and flag not in flags:
                    out.append(f"{page.name}: `orchestrator {name}` takes no {flag} ({code.strip()!r})")
    return out


def test_readme_is_a_front_page_that_links_every_reference_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for page in DOCS:
        assert f"docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"


def test_every_documented_command_and_flag_exists() -> None:
    commands = _commands()
    problems = [p for page in PAGES for p in _problems(page, commands)]
    assert not problems, "\n".join(problems)


def test_the_checker_sees_a_made_up_command_and_flag(tmp_path: Path) -> None:
    page = tmp_path / "x.md"
    page.write_text("Run `orchestrator frobnicate` and\n```bash\norchestrator up --no-such-flag\n```\n")
    found = _problems(page, _commands())
    assert any("frobnicate" in p for p in found) and any("--no-such-flag" in p for p in found)


def test_the_models_yaml_reference_is_generated_from_the_schema() -> None:
    page = (ROOT / "docs" / "models-yaml.md").read_text(encoding="utf-8")
    assert page == reference(), (
        "docs/models-yaml.md is stale: python -m orchestrator.config.reference > docs/models-yaml.md"
    )
    for key in ("`models[].speculative.n_max`", "`server.api_keys`", "`models[].kv_persist`"):
        assert key in page
