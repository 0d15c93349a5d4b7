"""The route table (``orchestrator.serve.routes``): every route of a built app has an auth group,
the guard applies it in front of every handler (forwarded POSTs included), and a route added
without a group stops the app from being built."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from proxy_harness import Stack
from supervision_helpers import fake_spec

from orchestrator.config.schema import Config, ModelConfig, ServerConfig
from orchestrator.serve.http.guard import Group
from orchestrator.serve.routes import route_table, ungrouped

KEY = "sk-route-table"
# a concrete request for each path template
SAMPLE = {"{model_id:path}": "demo", "{response_id}": "resp_1", "{response_id:path}": "resp_1/x",
          "{instance}": "demo-0", "{name:path}": "app.js"}  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = Config(server=ServerConfig(api_keys=[KEY]), models=[ModelConfig(name="demo", path="/unused.gguf")])
    s = Stack(config, [fake_spec(name="demo-0", alias="demo")], tmp_path_factory.mktemp("routes") / "logs")
    yield s
    s.close()


def concrete(path: str) -> str:
    for template, value in SAMPLE.items():
        path = path.replace(template, value)
    return path


def test_every_route_has_a_group_and_the_table_lists_them(stack: Stack) -> None:
    table = route_table(set())
    assert ungrouped(stack.app.routes, table) == []
    groups = {f"{m} {p}": table.match(m, concrete(p)) for m, p in table.paths()}
    assert all(r is not None for r in groups.values())
    shown = {route: r.group for route, r in groups.items() if r is not None}
    assert shown["POST /v1/chat/completions"] is Group.KEY and shown["POST /api/chat"] is Group.KEY
    assert shown["GET /health"] is Group.OPEN and shown["GET /metrics"] is Group.OPEN
    assert shown["GET /status"] is Group.KEY and shown["GET /ui/api/live"] is Group.KEY
    assert shown["POST /models/load"] is Group.ADMIN and shown["POST /reload"] is Group.ADMIN
    assert shown["GET /ui/{name:path}"] is Group.OPEN and shown["GET /api/version"] is Group.OPEN


def test_the_guard_applies_each_group_before_any_handler(stack: Stack) -> None:
    """Without the key every key and admin route is a 401 in its API's shape; an open route never
    is; with the key none is a 401."""
    table = route_table(set())
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        for method, path in table.paths():
            url = concrete(path)
            bare = client.request(method, url)
            group = table.match(method, url).group  # type: ignore[union-attr]
            if group is Group.OPEN:
                assert bare.status_code != 401, (method, path)
                continue
            assert bare.status_code == 401, (method, path, bare.text)
            assert bare.headers["www-authenticate"] == "Bearer"
            shape = bare.json()
            if path.startswith("/v1/messages"):
                assert shape["type"] == "error" and shape["error"]["type"] == "authentication_error"
            elif path.startswith("/api/"):
                assert isinstance(shape["error"], str)
            else:
                assert shape["error"]["code"] == "invalid_api_key", (method, path, shape)
            keyed = client.request(method, url, headers={"authorization": f"Bearer {KEY}"})
            assert keyed.status_code != 401, (method, path)


def test_a_route_without_a_group_is_named(tmp_path: Path) -> None:
    from fastapi import FastAPI

    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)  # as create_app builds it

    @app.get("/status")
    async def status() -> dict[str, str]:
        return {}

    @app.post("/v1/secret-new-thing")
    async def new_thing() -> dict[str, str]:
        return {}

    assert ungrouped(app.routes, route_table(set())) == ["POST /v1/secret-new-thing"]
