"""Option parsing for ``orchestrator bench``: draft-length and seed lists, and their limits.

Prompt sets and ``--prompts-file`` loading live in :mod:`orchestrator.bench.prompts`.
"""

from __future__ import annotations

from orchestrator.errors import UserError

# Beyond this, a^(K+1) is ~0 for any real acceptance rate; a bigger K only costs memory and time.
MAX_DRAFT_LENGTH = 32


def parse_int_list(text: str, *, option: str, minimum: int = 0) -> list[int]:
    """Parse ``"0,1,2"`` into sorted unique ints >= ``minimum``.

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
            raise UserError(f"{option}: {part!r} is not an integer", hint=f"e.g. {option} 0,1,2,4") from None
        if value < minimum:
            raise UserError(f"{option}: {value} is below {minimum}", hint=f"e.g. {option} 0,1,2,4")
        values.add(value)
    if not values:
        raise UserError(f"{option}: no values given", hint=f"e.g. {option} 0,1,2,4")
    return sorted(values)


def parse_seeds(text: str) -> list[int]:
    """Parse ``--seeds`` (comma-separated ints, order kept, duplicates dropped)."""
    out: list[int] = []
    for value in parse_int_list(text, option="--seeds", minimum=0):
        if value not in out:
            out.append(value)
    return out
