"""Prompt sets for ``orchestrator bench``: built-in ``math``, ``code``, ``general``, or a JSONL file.

Acceptance of the NextN/MTP draft depends on the domain (code and math repeat structure the
head predicts well; open prose less so), so the sweep reports every number per domain. The
built-in prompts are short so prefill stays small next to decode.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.errors import UserError


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: ``domain`` (a label such as "math") and the user message text."""

    domain: str
    prompt: str


# The CLI's default for --prompts; a --prompts-file replaces it unless other sets are named.
DEFAULT_SETS = "math,code,general"

BUILTIN: dict[str, tuple[str, ...]] = {
    "math": (
        "Solve step by step: a train travels 180 km in 2.5 hours. What is its average speed in km/h?",
        "Compute the sum of the first 50 positive odd integers and explain the pattern.",
        "Factor the polynomial x^3 - 6x^2 + 11x - 6 and list its roots.",
        "What is the derivative of f(x) = x^2 * sin(x)? Show each rule you use.",
    ),
    "code": (
        "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
        "Write a C function that reverses a null-terminated string in place.",
        "Implement binary search over a sorted list in Python and add three unit tests.",
        "Write a SQL query that returns the five customers with the highest total order amount.",
    ),
    "general": (
        "Explain in a short paragraph why the sky is blue.",
        "Give three practical tips for writing a clear e-mail to a colleague.",
        "Summarise the plot of Romeo and Juliet in four sentences.",
        "What are the main differences between a virus and a bacterium?",
    ),
}


def builtin_prompts(names: str) -> list[Prompt]:
    """Prompts of the comma-separated built-in sets in ``names`` (e.g. ``"math,code"``).

    Raises:
        UserError: for an unknown set name, or when ``names`` names none.
    """
    out: list[Prompt] = []
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    for name in wanted:
        if name not in BUILTIN:
            raise UserError(
                f"--prompts: unknown prompt set {name!r}",
                hint=f"choose from {', '.join(BUILTIN)} or pass --prompts-file FILE.jsonl",
            )
        out.extend(Prompt(name, text) for text in BUILTIN[name])
    if not out and wanted:
        raise UserError("--prompts: no prompt set given", hint=f"choose from {', '.join(BUILTIN)}")
    return out


def load_prompts_file(path: Path) -> list[Prompt]:
    """Read a JSONL file with one ``{"domain": str, "prompt": str}`` object per line.

    Blank lines are skipped.

    Raises:
        UserError: when the file is missing or empty, or a line is not such an object; the
            message names the file and the line number.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserError(f"--prompts-file: cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise UserError(
            f"--prompts-file: {path}: not UTF-8 text (byte {err.start})", hint="save the file as UTF-8 JSONL"
        ) from None
    out: list[Prompt] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(
                f"{where}: not valid JSON ({err.msg} at column {err.colno})",
                hint='each line must be an object like {"domain": "math", "prompt": "..."}',
            ) from None
        if not isinstance(obj, dict):
            raise UserError(
                f"{where}: expected a JSON object, got {type(obj).__name__}",
                hint='each line must be an object like {"domain": "math", "prompt": "..."}',
            )
        unknown = sorted(set(obj) - {"domain", "prompt"})
        if unknown:
            raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}", hint="only domain and prompt are read")
        for key in ("domain", "prompt"):
            value = obj.get(key)
            if not isinstance(value, str) or not value.strip():
                raise UserError(
                    f"{where}: {key!r} must be a non-empty string",
                    hint='each line must be an object like {"domain": "math", "prompt": "..."}',
                )
        out.append(Prompt(obj["domain"].strip(), obj["prompt"]))
    if not out:
        raise UserError(f"--prompts-file: {path} has no prompts", hint='one {"domain": ..., "prompt": ...} per line')
    return out


def select_prompts(prompts: str, prompts_file: Path | None) -> list[Prompt]:
    """The bench's prompts: the file's prompts when ``prompts_file`` is given, else the built-in sets.

    When both are given the file wins unless ``prompts`` names sets explicitly different from the
    CLI default; then both are used (built-ins first).
    """
    if prompts_file is None:
        return builtin_prompts(prompts)
    from_file = load_prompts_file(prompts_file)
    if prompts.strip() and prompts.strip() != DEFAULT_SETS:
        return builtin_prompts(prompts) + from_file
    return from_file


# Agents send long context before a short question: files read, tool output. The filler is code
# (seeded, so every K sees the same prompt), about CHARS_PER_TOKEN characters per token: Qwen's
# vocabulary (Qwen3.6's) reads it at 3.23-3.28 characters per token from 1k to 128k tokens, so
# a depth is at most that many tokens (3.6 made "8k" 9,077 tokens: past a context of
# depth + answer + 64, `orchestrator tune` and the GPU check's prefill rows got a 400).
CHARS_PER_TOKEN = 3.2
_WORDS = (
    "config", "request", "model", "slot", "draft", "token", "server", "cache", "index", "value",
    "result", "handler", "buffer", "offset", "length", "state", "event", "queue", "worker", "limit",
)  # fmt: skip


def depth_label(tokens: int) -> str:
    """``8192`` -> ``"8K"`` (the domain suffix of prompts at that depth)."""
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)


def context_text(tokens: int, seed: int = 0) -> str:
    """About ``tokens`` tokens of seeded Python-like code (a file an agent read into its context)."""
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    while size < tokens * CHARS_PER_TOKEN:
        a, b, c = (rng.choice(_WORDS) for _ in range(3))
        n = rng.randrange(1, 512)
        line = rng.choice(
            (
                f"def {a}_{b}(self, {c}: int = {n}) -> int:",
                f"    {a}_{c} = self.{b}.get({n}, {c})",
                f"    if {a} > {n}:",
                f"        return {b}_{c}({a}, {n})",
                f"# {a} {b}: keep the {c} below {n}",
                f"class {a.title()}{b.title()}:",
            )
        )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def at_depths(prompts: list[Prompt], depths: list[int]) -> list[Prompt]:
    """Every prompt at every depth: depth 0 as it is, others after ``context_text(depth)`` in a
    domain ``"<domain>@<label>"`` (so the sweep reports each depth apart)."""
    out: list[Prompt] = []
    for depth in depths:
        for p in prompts:
            if depth == 0:
                out.append(p)
            else:
                context = context_text(depth)
                question = f"Here is a file:\n\n{context}\n\n{p.prompt}"
                out.append(replace(p, domain=f"{p.domain}@{depth_label(depth)}", prompt=question))
    return out
