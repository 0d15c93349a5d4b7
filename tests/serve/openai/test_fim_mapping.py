"""``/v1/completions`` with ``suffix`` onto llama-server's ``/infill`` and back
(``orchestrator.serve.openai.fim``), on literals (B75)."""

from __future__ import annotations

import pytest

from orchestrator.errors import ApiError
from orchestrator.serve.openai import fim


def test_suffix_goes_to_infill_fields() -> None:
    body = {"model": "demo", "prompt": "def f(x):\n    ", "suffix": "\n    return y\n", "max_tokens": 16,
            "temperature": 0, "best_of": 1, "echo": False}  # fmt: skip
    assert fim.wants_infill(body)
    assert fim.infill_body(body) == {
        "model": "demo", "max_tokens": 16, "temperature": 0,
        "input_prefix": "def f(x):\n    ", "input_suffix": "\n    return y\n", "prompt": "",
    }  # fmt: skip
    assert fim.infill_body({**body, "prompt": ["one"]})["input_prefix"] == "one"
    for empty in ("", None):
        assert not fim.wants_infill({**body, "suffix": empty})
    with pytest.raises(ApiError) as err:
        fim.infill_body({**body, "prompt": ["a", "b"]})
    assert err.value.param == "prompt"
    with pytest.raises(ApiError) as err:
        fim.wants_infill({**body, "suffix": 5})
    assert err.value.param == "suffix"


def test_best_of_above_one_is_refused() -> None:
    fim.check_best_of({"best_of": 1})
    fim.check_best_of({})
    with pytest.raises(ApiError) as err:
        fim.check_best_of({"best_of": 2})
    assert err.value.status == 400 and err.value.param == "best_of"


def test_infill_answers_become_completions() -> None:
    shape = fim.CompletionShape("demo")
    native = {"content": "y = x", "stop": True, "stop_type": "limit", "model": "demo", "tokens_predicted": 16,
              "tokens_evaluated": 12, "timings": {"prompt_n": 12}}  # fmt: skip
    whole = shape.whole(native)
    assert whole["object"] == "text_completion" and whole["id"].startswith("cmpl-")
    assert whole["choices"] == [{"text": "y = x", "index": 0, "logprobs": None, "finish_reason": "length"}]
    assert whole["usage"] == {"prompt_tokens": 12, "completion_tokens": 16, "total_tokens": 28}
    part = shape.event({"content": "y", "stop": False})
    assert part["choices"][0] == {"text": "y", "index": 0, "logprobs": None, "finish_reason": None}
    last = shape.event({**native, "stop_type": "eos", "content": ""})
    assert last["choices"][0]["finish_reason"] == "stop" and last["id"] == part["id"] == whole["id"]


def test_a_model_without_fim_tokens_names_suffix() -> None:
    refused = fim.not_available(ApiError(400, "llama-server: Infill is not supported", code="not_supported"))
    assert (refused.status, refused.param, refused.code) == (400, "suffix", "fim_not_supported")
    other = ApiError(400, "something else")
    assert fim.not_available(other) is other
