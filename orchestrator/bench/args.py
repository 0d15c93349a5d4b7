"""Option parsing for ``orchestrator bench``: draft-length and seed lists, and their limits.

Prompt sets and ``--prompts-file`` loading live in :mod:`orchestrator.bench.prompts`.
"""

from __future__ import annotations

from orchestrator.errors import UserError

# Beyond this, a^(K+1) is ~0 for any real acceptance rate; a bigger K only costs memory and time.
MAX_DRAFT_LENGTH = 32


def parse_int_list(
    text: str, *, option: str, minimum: int = 0, example: str = "0,1,2,4", meaning: str = ""
) -> list[int]:
    """Parse ``"0,1,2"`` into sorted unique ints >= ``minimum``. For the messages: ``example``, a
    valid value of ``option`` (every number in it at least ``minimum``), and ``meaning``, what its
    numbers are.

    Raises:
        UserError: on an empty list, a non-integer or a value below ``minimum``.
    """
    values: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise UserError(f"{option}: {part!r} is not an integer", hint=f"e.g. {option} {example}") from None
        if value < minimum:
            said = f" ({meaning})" if meaning else ""
            raise UserError(f"{option}: {value} is below {minimum}{said}", hint=f"e.g. {option} {example}")
        values.add(value)
    if not values:
        raise UserError(f"{option}: no values given", hint=f"e.g. {option} {example}")
    return sorted(values)


def parse_seeds(text: str) -> list[int]:
    """Parse ``--seeds`` (comma-separated ints, order kept, duplicates dropped)."""
    out: list[int] = []
    for value in parse_int_list(text, option="--seeds", minimum=0):
        if value not in out:
            out.append(value)
    return out


def parse_depths(text: str) -> list[int]:
    """Parse ``--depths`` (``"0,8k,32k"``: prompt depths in tokens, ``k`` = 1024) into sorted ints.

    Raises:
        UserError: on an empty list, a value that is not a number of tokens, or one above 1M.
    """
    values: set[int] = set()
    for part in text.lower().replace(" ", "").split(","):
        if not part:
            continue
        scale = 1024 if part.endswith("k") else 1
        try:
            value = int(part[:-1] if scale > 1 else part) * scale
        except ValueError:
            raise UserError(f"--depths: {part!r} is not a number of tokens", hint="e.g. --depths 0,8k,32k") from None
        if not 0 <= value <= 1 << 20:
            raise UserError(f"--depths: {part} is outside 0..1M tokens", hint="e.g. --depths 0,8k,32k")
        values.add(value)
    if not values:
        raise UserError("--depths: no values given", hint="e.g. --depths 0,8k,32k")
    return sorted(values)
