"""Per-token probabilities that are complete with MTP drafting on (pure, no I/O).

Two faults of llama-server at the pin, both silent:

- drafting: it fills per-token probabilities only for tokens the target model sampled itself;
  tokens accepted from a draft come back with logprob 0 and no candidates
  (``tools/server/server-context.cpp``: "TODO: set result.probs"). A request that asks for
  probabilities (:func:`wants_token_probs`) is therefore sent with ``"speculative.n_max": 0``
  (native patch 0002), which turns drafting off for that request only (:func:`drafting_off`);
- zero candidates: ``logprobs: true`` with ``top_logprobs: 0`` (chat), or ``logprobs: 0``
  (``/v1/completions``), asks for each token's own logprob with no alternatives, but llama-server
  reads it as ``n_probs`` 0 and returns no log probabilities at all. :func:`widen` asks for one
  candidate instead, and :func:`trim` / :class:`TrimStream` empty the candidate lists again.
"""

from __future__ import annotations

from typing import Any, Protocol

_TOP = b'"top_logprobs"'


def _count(value: Any) -> bool:
    return value is True or (isinstance(value, int) and not isinstance(value, bool) and value > 0)


def wants_token_probs(body: dict[str, Any]) -> bool:
    """Whether a chat, completions or infill body asks for per-token probabilities.

    The fields at the pin: chat's ``logprobs: true`` (with ``top_logprobs``, default 20),
    ``/v1/completions``' ``logprobs: N`` (0 included, see :func:`widen`), and the native
    ``n_probs: N`` (``post_sampling_probs`` only changes how they are reported).
    ``server-common.cpp`` and ``server-schema.cpp``.
    """
    if body.get("logprobs") == 0 and "messages" not in body and not isinstance(body.get("logprobs"), bool):
        return True
    return any(_count(body.get(key)) for key in ("logprobs", "n_probs", "top_logprobs"))


def drafting_off(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with drafting turned off for this request (patch 0002's per-request n_max)."""
    new = {k: v for k, v in body.items() if k not in ("speculative.n_max", "speculative.n_min")}
    new["speculative.n_max"] = 0
    return new


def widen(body: dict[str, Any]) -> dict[str, Any] | None:
    """A body asking for one candidate where the client asked for none, or None when not needed.

    Chat: ``logprobs: true`` with ``top_logprobs: 0``; completions: ``logprobs: 0``. The answer
    must then go through :func:`trim` (or :class:`TrimStream`).
    """
    if "messages" in body:
        if body.get("logprobs") is True and body.get("top_logprobs") == 0:
            return {**body, "top_logprobs": 1}
        return None
    logprobs = body.get("logprobs")
    if logprobs == 0 and not isinstance(logprobs, bool) and "n_probs" not in body:
        return {**body, "logprobs": 1}
    return None


def trim(obj: dict[str, Any]) -> bool:
    """Empty every token's candidate list in an answer or stream chunk, in place.

    Returns:
        Whether anything was changed.
    """
    changed = False
    for choice in obj.get("choices") or []:
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        for token in (logprobs or {}).get("content") or []:
            if isinstance(token, dict) and token.get("top_logprobs"):
                token["top_logprobs"] = []
                changed = True
    return changed


class _Repair(Protocol):
    def needs_parse(self, raw: bytes) -> bool: ...

    def repair(self, chunk: dict[str, Any]) -> tuple[dict[str, Any], list[str]]: ...

    def finish(self) -> dict[str, Any] | None: ...


class TrimStream:
    """A stream repair (the protocol of ``stream_repair.StreamRepair``) that applies :func:`trim`
    to each event carrying candidates, then the ``inner`` repair, if any."""

    def __init__(self, inner: _Repair | None) -> None:
        self.inner = inner

    def needs_parse(self, raw: bytes) -> bool:
        """Whether ``raw`` has candidates to trim or the inner repair wants it."""
        return _TOP in raw or (self.inner is not None and self.inner.needs_parse(raw))

    def repair(self, chunk: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Trim, then the inner repair; a changed chunk is returned as a new object."""
        if trim(chunk):
            chunk = dict(chunk)
        if self.inner is None:
            return chunk, []
        return self.inner.repair(chunk)

    def finish(self) -> dict[str, Any] | None:
        """The inner repair's held-back text, if any."""
        return self.inner.finish() if self.inner is not None else None
