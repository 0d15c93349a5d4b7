"""Record what a real coding agent sends: a scripted stand-in endpoint that logs every request body.

    python scripts/capture_agent.py OUT_DIR [--port 8765] [--tool-turns 2]

Point a client at ``http://127.0.0.1:PORT`` (Claude Code: ``ANTHROPIC_BASE_URL``; Codex: a
``config.toml`` provider with ``base_url = "http://127.0.0.1:PORT/v1"`` and ``wire_api =
"responses"``; opencode: a provider's ``baseURL``) and run it. Every POST body is written to
``OUT_DIR/NNN-<route>.json`` as received. The answers are scripted, so the client's tool loop goes
on the way it would with a real model: for each conversation, the first ``--tool-turns`` answers
call the client's shell tool (``Bash`` for Claude Code, ``shell``/``exec_command`` for Codex,
``bash`` for opencode) with ``echo turn-N``; the next answer is text. Requests from the clients'
side tasks (titles, summaries: requests without tools) get a short text answer.

This is how the recorded sessions under ``tests/data/agent_sessions/`` were captured (local paths
replaced afterwards); it is not part of the endpoint.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SHELL_NAMES = ("Bash", "shell", "exec_command", "shell_command", "bash")


def _sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data) + "\n\n").encode()


def _tool_turns_so_far(body: dict[str, Any]) -> int:
    items = body.get("messages") or body.get("input") or []
    n = 0
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
            n += 1
        if item.get("role") == "assistant":
            content = item.get("content")
            if isinstance(content, list):
                n += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_use")
            n += len(item.get("tool_calls") or [])
    return n


def _shell_tool(tools: list[Any]) -> tuple[str, dict[str, Any]] | None:
    """(name, arguments) for the client's shell tool, or None."""
    names = {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(fn.get("name"), str):
            names[fn["name"]] = fn
    for name in SHELL_NAMES:
        if name in names:
            if name in ("exec_command", "shell_command"):
                return name, {"cmd": "echo turn", "command": "echo turn"}
            if name == "shell":
                return name, {"command": ["bash", "-lc", "echo turn"]}
            return name, {"command": "echo turn", "description": "print a word"}
    return None


class Script:
    def __init__(self, out: Path, tool_turns: int) -> None:
        self.out = out
        self.tool_turns = tool_turns
        self.seq = itertools.count(1)

    def record(self, route: str, body: Any, headers: dict[str, str]) -> None:
        name = route.strip("/").replace("/", "_") or "root"
        path = self.out / f"{next(self.seq):03d}-{name}.json"
        path.write_text(json.dumps({"route": route, "headers": headers, "body": body}, indent=1))

    def decide(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        tools = body.get("tools") or []
        if not tools or _tool_turns_so_far(body) >= self.tool_turns:
            return None
        call = _shell_tool(tools)
        if call is None:
            return None
        name, args = call
        args = {
            k: (v.replace("turn", f"turn-{_tool_turns_so_far(body) + 1}") if isinstance(v, str) else v)
            for k, v in args.items()
        }
        return name, args


def anthropic_stream(call: tuple[str, dict[str, Any]] | None, text: str) -> list[bytes]:
    msg = {
        "id": f"msg_{time.time_ns()}",
        "type": "message",
        "role": "assistant",
        "model": "demo",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 0},
    }
    out = [_sse("message_start", {"type": "message_start", "message": msg})]
    if call is None:
        out += [
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
            _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
            ),
        ]
        stop = "end_turn"
    else:
        block = {"type": "tool_use", "id": f"toolu_{time.time_ns()}", "name": call[0], "input": {}}
        out += [
            _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(call[1])},
                },
            ),
        ]
        stop = "tool_use"
    out += [
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}),
        _sse("message_stop", {"type": "message_stop"}),
    ]
    return out


def responses_stream(call: tuple[str, dict[str, Any]] | None, text: str) -> list[bytes]:
    rid = f"resp_{time.time_ns()}"
    base = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "model": "demo",
        "output": [],
        "status": "in_progress",
    }
    seq = itertools.count()
    out = [_sse("response.created", {"type": "response.created", "sequence_number": next(seq), "response": base})]
    if call is None:
        item = {
            "type": "message",
            "id": f"msg_{rid}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        added = {**item, "status": "in_progress", "content": []}
        out += [
            _sse(
                "response.output_item.added",
                {"type": "response.output_item.added", "sequence_number": next(seq), "output_index": 0, "item": added},
            ),
            _sse(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "sequence_number": next(seq),
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": text,
                },
            ),
        ]
    else:
        item = {
            "type": "function_call",
            "id": f"fc_{rid}",
            "call_id": f"call_{rid}",
            "name": call[0],
            "arguments": json.dumps(call[1]),
            "status": "completed",
        }
        out.append(
            _sse(
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "sequence_number": next(seq),
                    "output_index": 0,
                    "item": {**item, "arguments": ""},
                },
            )
        )
    usage = {
        "input_tokens": 10,
        "output_tokens": 5,
        "total_tokens": 15,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    out += [
        _sse(
            "response.output_item.done",
            {"type": "response.output_item.done", "sequence_number": next(seq), "output_index": 0, "item": item},
        ),
        _sse(
            "response.completed",
            {
                "type": "response.completed",
                "sequence_number": next(seq),
                "response": {**base, "status": "completed", "output": [item], "usage": usage},
            },
        ),
    ]
    return out


def chat_stream(call: tuple[str, dict[str, Any]] | None, text: str) -> list[bytes]:
    cid = f"chatcmpl-{time.time_ns()}"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(
            None,
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": "demo",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            },
        )

    if call is None:
        out = [chunk({"role": "assistant", "content": text}), chunk({}, "stop")]
    else:
        tc = {
            "index": 0,
            "id": f"call_{cid}",
            "type": "function",
            "function": {"name": call[0], "arguments": json.dumps(call[1])},
        }
        out = [chunk({"role": "assistant", "tool_calls": [tc]}), chunk({}, "tool_calls")]
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    out.append(_sse(None, {"id": cid, "object": "chat.completion.chunk", "choices": [], "usage": usage}))
    return [*out, b"data: [DONE]\n\n"]


def make_app(script: Script) -> Starlette:
    async def handle(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "x-api-key")}
        script.record(request.url.path, body, headers)
        if not isinstance(body, dict):
            return JSONResponse({"object": "list", "data": [{"id": "demo", "object": "model"}]})
        path = request.url.path
        if path.endswith("count_tokens"):
            return JSONResponse({"input_tokens": 100})
        call = script.decide(body)
        if path.endswith("/messages"):
            events = anthropic_stream(call, "Hello")
        elif path.endswith("/responses"):
            events = responses_stream(call, "Hello")
        else:
            events = chat_stream(call, "Hello")
        return StreamingResponse(iter(events), media_type="text/event-stream")

    async def models(_request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "demo", "object": "model", "owned_by": "local"}]})

    async def root(_request: Request) -> Response:
        return Response(b"", 200)

    routes = [
        Route("/", root, methods=["GET", "HEAD"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/{path:path}", handle, methods=["POST"]),
    ]
    return Starlette(routes=routes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--tool-turns", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    uvicorn.run(make_app(Script(args.out, args.tool_turns)), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
