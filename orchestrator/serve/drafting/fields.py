"""The per-request draft length: ``"speculative": {"n_max": K, "n_min": M}`` as clients send it,
checked and turned into the flat fields llama-server reads (``"speculative.n_max"``,
``"speculative.n_min"``; our patch ``native/patches/0002-per-request-draft-length.patch``).

Pure: imports nothing of the package but ``orchestrator.errors``.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ApiError


def _bad_field(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


# llama-server reads these fields as int32 (tools/server/server-schema.cpp); a larger JSON
# integer wraps there and the client gets "got -2147483648" for the number it sent.
_INT32_MAX = 2**31 - 1


def _check_speculative_value(key: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad_field(f"{key} must be a non-negative integer (a draft length in tokens), got {value!r}", key)
    if value > _INT32_MAX:
        raise _bad_field(f"{key} must be at most {_INT32_MAX} (a draft length in tokens), got {value}", key)


def flatten_speculative(body: dict[str, Any]) -> dict[str, Any] | None:
    """The ``speculative`` translation alone, for bodies without messages (``/v1/completions``).

    Returns a new body with ``"speculative": {"n_max": K, "n_min": M}`` replaced by the flat
    ``"speculative.n_max"``/``"speculative.n_min"`` fields, or None when there is nothing to translate.

    Raises:
        ApiError: 400 with ``param`` for a bad ``speculative`` object or value.
    """
    flat = flat_speculative_fields(body)
    if flat is None:
        return None
    new = {k: v for k, v in body.items() if k != "speculative"}
    new.update(flat)
    return new


def flat_speculative_fields(body: dict[str, Any]) -> dict[str, Any] | None:
    """Return the flat ``speculative.*`` fields to set, or None when there is nothing to flatten.

    llama-server's per-request fields are flat keys (``"speculative.n_max"``, see
    ``tools/server/server-schema.cpp`` and the project's patch); clients naturally send a nested
    object. Only ``n_max`` and ``n_min`` are accepted: the patch reads ``n_max``; anything else
    would be silently ignored upstream.
    """
    for flat in ("speculative.n_max", "speculative.n_min"):
        if flat in body:
            _check_speculative_value(flat, body[flat])
    if "speculative" not in body:
        _check_order(body.get("speculative.n_max"), body.get("speculative.n_min"))
        return None
    spec = body["speculative"]
    if not isinstance(spec, dict):
        raise _bad_field('\'speculative\' must be an object such as {"n_max": 4, "n_min": 1}', "speculative")
    flat_fields: dict[str, Any] = {}
    for key, value in spec.items():
        name = f"speculative.{key}"
        if key not in ("n_max", "n_min"):
            raise _bad_field(f"{name} is not supported per request; use n_max and n_min", name)
        _check_speculative_value(name, value)
        if name in body and body[name] != value:
            raise _bad_field(f"{name} is given twice with different values ({body[name]!r} and {value!r})", name)
        flat_fields[name] = value
    n_max = flat_fields.get("speculative.n_max", body.get("speculative.n_max"))
    n_min = flat_fields.get("speculative.n_min", body.get("speculative.n_min"))
    _check_order(n_max, n_min)
    return flat_fields


def _check_order(n_max: Any, n_min: Any) -> None:
    # flat or nested alike: llama-server would take n_min > n_max without a word
    if n_max is not None and n_min is not None and n_min > n_max:
        raise _bad_field(
            f"speculative.n_min ({n_min}) must not exceed speculative.n_max ({n_max})", "speculative.n_min"
        )
