"""The CLI stays light: ``orchestrator --help`` must not import the heavy stacks."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("fastapi", "uvicorn", "numpy", "gguf", "llama_cpp", "httpx", "matplotlib", "pydantic", "prometheus_client")


def test_help_imports_none_of_the_heavy_modules() -> None:
    code = (
        "import sys, json\n"
        "from typer.testing import CliRunner\n"
        "from orchestrator.cli.app import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    assert _fresh_json(code) == []


def test_user_error_is_one_line_and_exit_2_not_a_traceback(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "models.yaml"
    bad.write_text("models:\n  - name: demo\n    path: builtin:tiny-mtp\n    speculative: {n_max: 2, n_min: 5}\n")
    r = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.app", "up", "--dry-run", "-c", str(bad)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"{bad}:4" in r.stderr and "n_min" in r.stderr


def test_help_shows_every_bracketed_part_of_each_option() -> None:
    """rich reads ``[@...]`` (and other tags) as markup and drops it: ``pull --help`` lost ``[@REVISION]``."""
    code = (
        "import json, re, typer\n"
        "from typer.testing import CliRunner\n"
        "from orchestrator.cli.app import app\n"
        "missing = []\n"
        "for name, cmd in typer.main.get_command(app).commands.items():\n"
        "    r = CliRunner().invoke(app, [name, '--help'], env={'COLUMNS': '400', 'TERMINAL_WIDTH': '400'})\n"
        "    flat = ' '.join(r.output.split())\n"
        "    for p in cmd.params:\n"
        "        tags = re.findall(r'\\[[^\\]\\s]*\\]', p.help or '')\n"
        "        missing += [[name, p.name, t] for t in tags if t not in flat]\n"
        "print(json.dumps(missing))\n"
    )
    assert _fresh_json(code) == []


def test_each_command_summary_reads_as_one_line_at_a_wide_terminal() -> None:
    """A docstring breaks its lines where the source does; the help reflows them: at a wide
    terminal every command's summary in ``orchestrator --help`` (and ``bench --help``) is one line."""
    code = (
        "import json, typer\n"
        "from typer.testing import CliRunner\n"
        "from orchestrator.cli.app import app\n"
        "broken = []\n"
        "env = {'COLUMNS': '400', 'TERMINAL_WIDTH': '400'}\n"
        "for prefix in ([], ['bench']):\n"
        "    group = typer.main.get_command(app)\n"
        "    for p in prefix:\n"
        "        group = group.commands[p]\n"
        "    out = CliRunner().invoke(app, [*prefix, '--help'], env=env).output\n"
        "    for name, cmd in group.commands.items():\n"
        "        summary = ' '.join((cmd.help or '').split('\\n\\n')[0].replace('`', '').split())\n"
        "        if summary and not any(name in line and summary in line for line in out.splitlines()):\n"
        "            broken.append([*prefix, name])\n"
        "print(json.dumps(broken))\n"
    )
    assert _fresh_json(code) == []


def _fresh_json(code: str) -> object:
    """What ``code`` prints last, as JSON, run in a fresh interpreter (nothing imported before it)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])
