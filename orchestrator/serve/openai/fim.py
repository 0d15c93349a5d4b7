"""``/v1/completions`` with ``suffix`` (fill-in-the-middle, what autocomplete clients send): through
llama-server's ``/infill``, answered in the OpenAI completion shape.

The pinned llama-server's ``/v1/completions`` drops ``suffix`` without a word (the parser that
refused it is no longer called), so the answer would be a plain continuation that does not join
the code after the cursor. Its ``/infill`` does fill in the middle, from ``input_prefix`` and
``input_suffix``, when the model's vocabulary has the fill-in-the-middle tokens; otherwise it
answers 501 "not supported", which becomes a 400 naming ``suffix`` here (llama-server reads the
vocabulary: nothing is assumed about the model). A ``suffix`` that is ``""`` or null is no suffix.

``/infill`` answers in llama-server's own shape (``content``, ``stop_type``, ``tokens_predicted``,
``tokens_evaluated``), whole or as ``data:`` events with no ``[DONE]``; both become OpenAI's
``text_completion`` (``choices[0].text``, ``finish_reason``, ``usage``), the stream ending with
``data: [DONE]``. ``best_of`` above 1 (several completions decoded, the best returned) is not
served: a 400 naming it.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from orchestrator.errors import ApiError

INFILL_PATH = "/infill"
# the client's fields that /infill reads differently or not at all
_NOT_FORWARDED = ("prompt", "suffix", "best_of", "echo")


def check_best_of(body: dict[str, Any]) -> None:
    """``best_of`` 1 (or absent) is a no-op; more is a 400 naming it."""
    best_of = body.get("best_of")
    if best_of is None or (type(best_of) is int and best_of <= 1):
        return
    raise ApiError(
        400,
        f"best_of={best_of!r} is not supported: one completion is decoded per choice; omit best_of or send 1 "
        "(n asks for several choices)",
        param="best_of",
    )


def wants_infill(body: dict[str, Any]) -> bool:
    """Whether a completion request asks to fill in the middle: a non-empty string ``suffix``.

    Raises:
        ApiError: 400 naming ``suffix`` when it is not a string.
    """
    suffix = body.get("suffix")
    if suffix is None or suffix == "":
        return False
    if not isinstance(suffix, str):
        raise ApiError(400, "suffix must be a string (the text after the cursor)", param="suffix")
    return True


def infill_body(body: dict[str, Any]) -> dict[str, Any]:
    """The ``/infill`` body for a completion request with ``suffix``: the prompt before the
    cursor is ``input_prefix``, the suffix ``input_suffix``; sampling fields pass as they are.

    Raises:
        ApiError: 400 naming ``prompt`` when it is not one string (``/infill`` fills one gap).
    """
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(400, "with suffix, prompt must be one string (the text before the cursor)", param="prompt")
    out = {k: v for k, v in body.items() if k not in _NOT_FORWARDED}
    out.update(input_prefix=prompt, input_suffix=body["suffix"], prompt="")
    return out


def not_available(err: ApiError) -> ApiError:
    """llama-server's "infill not supported" (501, code ``not_supported``) as the 400 naming
    ``suffix``; any other error as it is."""
    if err.code != "not_supported":
        return err
    return ApiError(
        400,
        "suffix: fill-in-the-middle is not available for this model (its vocabulary has no FIM tokens); "
        f"send the completion without suffix ({err.message})",
        param="suffix",
        code="fim_not_supported",
    )


def _finish(native: dict[str, Any]) -> str:
    return "length" if native.get("stop_type") == "limit" else "stop"


class CompletionShape:
    """One completion's OpenAI frame (id, creation time, model), shared by its whole answer and
    every event of its stream."""

    def __init__(self, model: str) -> None:
        self.id = "cmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model

    def _frame(self, native: dict[str, Any], text: Any, finish: str | None) -> dict[str, Any]:
        choice = {"text": text if isinstance(text, str) else "", "index": 0, "logprobs": None, "finish_reason": finish}
        model = native.get("model") if isinstance(native.get("model"), str) else self.model
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": model,
                "choices": [choice]}  # fmt: skip

    def whole(self, native: dict[str, Any]) -> dict[str, Any]:
        """llama-server's whole ``/infill`` answer as an OpenAI completion."""
        out = self._frame(native, native.get("content"), _finish(native))
        out["usage"] = _usage(native)
        if isinstance(native.get("timings"), dict):
            out["timings"] = native["timings"]
        return out

    def event(self, native: dict[str, Any]) -> dict[str, Any]:
        """One ``/infill`` stream event as an OpenAI completion chunk; the last one carries the
        finish reason, ``usage`` and llama-server's ``timings``."""
        if native.get("stop") is not True:
            return self._frame(native, native.get("content"), None)
        out = self._frame(native, native.get("content"), _finish(native))
        out["usage"] = _usage(native)
        if isinstance(native.get("timings"), dict):
            out["timings"] = native["timings"]
        return out


def _usage(native: dict[str, Any]) -> dict[str, int]:
    prompt, completion = native.get("tokens_evaluated"), native.get("tokens_predicted")
    prompt = prompt if type(prompt) is int else 0
    completion = completion if type(completion) is int else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class InfillStream:
    """The stream repair (``stream_repair.StreamRepair``'s protocol) that turns ``/infill``
    events into completion chunks (the codec adds ``[DONE]``: ``/infill`` sends none)."""

    def __init__(self, model: str) -> None:
        self.shape = CompletionShape(model)

    def needs_parse(self, raw: bytes) -> bool:
        """Every event changes shape."""
        return True

    def repair(self, chunk: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        return self.shape.event(chunk), []

    def finish(self) -> dict[str, Any] | None:
        return None
