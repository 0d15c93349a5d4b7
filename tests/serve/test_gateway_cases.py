"""Gateway contracts agents rely on (``tests/data/gateway_cases.json``: B57-B66, P1, S1), through the
endpoint to a real llama-server: each case's requests in order, each with its status and, where
the case names one, a check of what came back.

One stack: API key ``K1``, the echo demo model with thinking on by default (its answers stay in
the reasoning unless thinking is off, so "thinks" and "no thinking" are visible), an alias
``tiny`` for paging, one slot.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

CASES = json.loads((Path(__file__).resolve().parents[1] / "data" / "gateway_cases.json").read_text())["cases"]
CTX, PARALLEL = 4096, 1


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [{"name": "demo", "aliases": ["tiny"], "parallel": PARALLEL, "ctx_size": CTX, "thinking": True}]
    s = real_stack(tmp_path_factory.mktemp("gw"), echo_model, bin_info, server={"api_keys": ["K1"]}, models=models)
    yield s
    s.close()


def _reasoning(path: str, body: dict[str, Any]) -> str:
    """The reasoning an answer returned, in its API's place."""
    if path == "/api/chat":
        return str(body["message"].get("thinking") or "")
    if path == "/v1/chat/completions":
        return str(body["choices"][0]["message"].get("reasoning_content") or "")
    if path == "/v1/responses":
        items = [i for i in body["output"] if i["type"] == "reasoning"]
        return "".join(c["text"] for i in items for c in i.get("content") or [])
    return "".join(b.get("thinking", "") for b in body["content"] if b["type"] == "thinking")


def _text(path: str, body: dict[str, Any]) -> str:
    if path == "/v1/chat/completions":
        return str(body["choices"][0]["message"].get("content") or "")
    return "".join(b.get("text", "") for b in body["content"] if b["type"] == "text")


def _summary(item: dict[str, Any]) -> str:
    return str(json.loads(base64.urlsafe_b64decode(item["encrypted_content"].split(":", 1)[1]))["summary"])


class Run:
    """One case's requests against the stack, with what earlier requests left for later ones."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.previous: dict[str, Any] | None = None
        self.saved: dict[str, Any] = {}

    def send(self, req: dict[str, Any]) -> tuple[httpx.Response, dict[str, Any] | None, str]:
        body = json.loads(json.dumps(req.get("body")).replace('"$compaction"', json.dumps(self.saved.get("c"))))
        with httpx.Client(base_url=self.stack.url, timeout=120) as client:
            r = client.request(req["method"], req["path"], json=body, headers=req["headers"])
        parsed = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
        return r, parsed, r.text

    def check(self, name: str, req: dict[str, Any], body: dict[str, Any] | None, text: str) -> None:
        path = req["path"]
        kind, _, arg = name.partition(":")
        CHECKS[kind](self, path, body or {}, text, arg)
        self.previous = body


def _anthropic_list(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    for entry in body["data"]:
        assert entry["type"] == "model" and entry["display_name"] and entry["created_at"], entry
    assert body["has_more"] is False and body["first_id"] == "demo" and body["last_id"] == "tiny"


def _first_page(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    assert [m["id"] for m in body["data"]] == ["demo"] and body["has_more"] is True


def _after_demo(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    assert [m["id"] for m in body["data"]] == ["tiny"] and body["has_more"] is False


def _anthropic_error(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    assert body["type"] == "error" and body["error"]["type"] in ("authentication_error", "not_found_error"), body


def _codex_catalog(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    (entry,) = body["models"]
    assert entry["slug"] == "demo" and entry["context_window"] == CTX // PARALLEL, entry
    assert entry["supported_reasoning_levels"] and entry["input_modalities"] == ["text"]


def _no_catalog(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    assert "models" not in body and [m["id"] for m in body["data"]] == ["demo", "tiny"]


def _thinks(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    assert _reasoning(path, body), body


def _no_thinking(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    assert not _reasoning(path, body), body


def _reuses_previous(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    before, now = run.previous["usage"] if run.previous else {}, body["usage"]
    seen = before.get("input_tokens", 0) + before.get("cache_read_input_tokens", 0) + before.get("output_tokens", 0)
    new = now["input_tokens"] + now["cache_read_input_tokens"] - seen
    assert now["input_tokens"] <= max(0, new) + 64, (before, now)


def _compacted(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    assert body["object"] == "response.compaction" and body["output"][-1]["type"] == "compaction"
    assert [i for i in body["output"] if i["type"] == "compaction"] == [body["output"][-1]]
    run.saved["c"] = body["output"][-1]


def _triggered_stream(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.completed", [e["type"] for e in events]
    (item,) = events[-1]["response"]["output"]
    assert item["type"] == "compaction" and _summary(item)


def _summary_replayed(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    alone = httpx.post(
        run.stack.url + "/v1/responses/input_tokens",
        json={"model": "demo", "instructions": "S0", "input": [{"role": "user", "content": "U3"}]},
        headers={"Authorization": "Bearer K1"},
    ).json()["input_tokens"]
    assert body["usage"]["input_tokens"] + body["usage"]["input_tokens_details"]["cached_tokens"] > alone + 3


def _not_repeated(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    answer = _text(path, body) or _reasoning(path, body)
    assert answer and not answer.startswith(arg), answer


def _param(run: Run, path: str, body: dict[str, Any], text: str, arg: str) -> None:
    error = body["error"]
    assert error.get("param") == arg or arg in error["message"], body


CHECKS: dict[str, Callable[[Run, str, dict[str, Any], str, str], None]] = {
    "anthropic_list": _anthropic_list,
    "first_page": _first_page,
    "after_demo": _after_demo,
    "anthropic_error": _anthropic_error,
    "codex_catalog": _codex_catalog,
    "no_catalog": _no_catalog,
    "thinks": _thinks,
    "no_thinking": _no_thinking,
    "reuses_previous": _reuses_previous,
    "compacted": _compacted,
    "triggered_stream": _triggered_stream,
    "summary_replayed": _summary_replayed,
    "not_repeated": _not_repeated,
    "param": _param,
}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_gateway_case(stack: Stack, case: dict[str, Any]) -> None:
    run = Run(stack)
    for i, req in enumerate(case["requests"]):
        r, body, text = run.send(req)
        assert r.status_code == req["status"], (case["id"], i, r.status_code, text[:500])
        assert not 300 <= r.status_code < 400
        if "check" in req:
            run.check(req["check"], req, body, text)
        else:
            run.previous = body


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("/v1/responses/compact", {}),
        ("/v1/responses/compact", {"input": []}),
        ("/v1/responses/compact", {"input": ""}),
        ("/v1/responses", {"input": [{"type": "compaction_trigger"}]}),
        ("/v1/responses", {"input": [{"type": "compaction_trigger"}], "stream": True}),
    ],
    ids=["compact-no-input", "compact-empty-list", "compact-empty-string", "trigger-alone", "trigger-alone-stream"],
)
def test_a_compaction_with_nothing_to_compact_is_a_400_naming_input(
    stack: Stack, path: str, fields: dict[str, Any]
) -> None:
    """No history: the model used to summarise nothing, holding the slot for up to 2048 tokens (10-21 s)
    and answering 200; now a 400 in the OpenAI shape, and nothing reaches llama-server."""
    stack.recorder.clear()
    r = httpx.post(
        stack.url + path, json={"model": "demo", **fields}, headers={"Authorization": "Bearer K1"}, timeout=60
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["type"]) == ("input", "invalid_request_error")
    assert error["code"] == "missing_required_parameter"
    assert "input" in error["message"]
    assert stack.recorder.requests == []
