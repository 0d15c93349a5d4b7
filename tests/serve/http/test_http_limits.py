"""Limits at the HTTP layer of the real proxy (uvicorn with ``serve/http/limits.py``), raw sockets.

- a header over ``server.max_header_bytes`` is a 431 in JSON, read before the whole line arrives;
- a head or a body sent too slowly (slowloris) gets 408 after ``client_header`` / ``client_body``;
- malformed HTTP gets a JSON 400, after the answers of the valid requests before it on its connection;
- the proxy keeps serving meanwhile.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from proxy_harness import Stack
from supervision_helpers import fake_spec, fast_policy

from orchestrator.config.schema import Config, ModelConfig, ServerConfig, Timeouts

HEADER_LIMIT = 8 * 1024
HEAD_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    server = ServerConfig(
        max_header_bytes=HEADER_LIMIT, timeouts=Timeouts(client_header=HEAD_TIMEOUT, client_body=BODY_TIMEOUT)
    )
    config = Config(server=server, models=[ModelConfig(name="demo", path="/unused.gguf")])
    s = Stack(config, [fake_spec()], tmp_path_factory.mktemp("http") / "logs", policy=fast_policy())
    s.start_instances()
    yield s
    s.close()


def connect(stack: Stack) -> socket.socket:
    port = int(stack.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, object]]:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_header_over_the_limit_is_a_431_before_it_ends(stack: Stack) -> None:
    sock = connect(stack)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: [::1]\r\nX-Big: " + b"a" * (HEADER_LIMIT * 4))
    status, doc = read_response(sock)  # answered without the line ever ending
    assert status == 431 and doc["error"]["code"] == "headers_too_large"  # type: ignore[index]
    assert httpx.get(stack.url + "/health", timeout=10).status_code == 200


def test_headers_under_the_limit_pass(stack: Stack) -> None:
    response = httpx.get(stack.url + "/health", headers={"x-pad": "a" * (HEADER_LIMIT // 2)}, timeout=10)
    assert response.status_code == 200


def test_slow_headers_get_408(stack: Stack) -> None:
    started = time.monotonic()  # before connecting: the server's clock starts at the connection
    sock = connect(stack)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: [::1]\r\n")
    status, doc = read_response(sock)
    assert status == 408 and doc["error"]["code"] == "request_timeout"  # type: ignore[index]
    assert HEAD_TIMEOUT <= time.monotonic() - started < HEAD_TIMEOUT + 10


def test_slow_body_gets_408_in_the_api_shape(stack: Stack) -> None:
    started = time.monotonic()
    sock = connect(stack)
    sock.sendall(
        b"POST /v1/messages HTTP/1.1\r\nHost: [::1]\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"
    )
    status, doc = read_response(sock)
    assert status == 408 and doc["type"] == "error"  # Anthropic's shape on /v1/messages
    assert BODY_TIMEOUT <= time.monotonic() - started < BODY_TIMEOUT + 10


def test_malformed_http_gets_a_json_400(stack: Stack) -> None:
    sock = connect(stack)
    sock.sendall(b"GARBAGE \x00\x01 nonsense\r\n\r\n")
    status, doc = read_response(sock)
    assert status == 400 and doc["error"]["code"] == "invalid_http"  # type: ignore[index]
    assert httpx.get(stack.url + "/health", timeout=10).status_code == 200


def read_responses(sock: socket.socket) -> list[tuple[int, bytes]]:
    """Every response on the connection until the server closes it: (status, body)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    found = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        found.append((int(head.split()[1]), rest[:length]))
        data = rest[length:]
    return found


def test_garbage_after_a_request_costs_it_no_answer(stack: Stack) -> None:
    sock = connect(stack)
    request = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
    sock.sendall(request + request + b"GARBAGE \x00\x01 nonsense\r\n\r\n")  # two requests, then junk
    (first, body1), (second, body2), (status, junk) = read_responses(sock)
    assert first == second == 200 and json.loads(body1)["status"] == json.loads(body2)["status"] == "ok"
    assert status == 400 and json.loads(junk)["error"]["code"] == "invalid_http"
    assert httpx.get(stack.url + "/health", timeout=10).status_code == 200
