"""The route table: every route the endpoint serves, with its auth group (``serve.http.guard``).

The handlers live with their concern (each API folder, ``info``, ``control``, the console); who may
call them is declared here, once, and applied by ``Guard`` in front of them all.
``tests/serve/http/test_route_table.py`` lists every route of a built app against this table and
fails on a route without a group. The first matching rule decides, so a specific path comes before
a catch-all under it.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.routing import BaseRoute

from orchestrator.serve.http.guard import Group, RouteTable, Rule, rule
from orchestrator.serve.registry import served

OPEN, KEY, ADMIN = Group.OPEN, Group.KEY, Group.ADMIN

# besides each API's POST (from the adapters): listings, stored responses, control, the console
OTHER: tuple[Rule, ...] = (
    rule("HEAD", "/", OPEN),  # agents' connectivity probe (Claude Code at start)
    rule("GET|HEAD", "/health", OPEN, unless="auth_health"),
    rule("GET", "/metrics", OPEN, unless="auth_metrics"),
    rule("GET", "/status", KEY),
    rule("GET", "/peers", KEY),
    rule("GET", "/v1/models", KEY),
    rule("GET", "/v1/models/{model_id:path}", KEY),
    rule("GET", "/v1/responses", KEY),  # the WebSocket upgrade Codex tries first (426)
    rule("GET", "/v1/responses/{response_id}/input_items", KEY),
    rule("POST", "/v1/responses/{response_id}/cancel", KEY),
    rule("GET|DELETE", "/v1/responses/{response_id}", KEY),
    rule("GET|DELETE|POST", "/v1/responses/{response_id:path}", KEY),
    rule("POST", "/models/load", ADMIN),
    rule("POST", "/models/unload", ADMIN),
    rule("POST", "/models/restart", ADMIN),
    rule("POST", "/reload", ADMIN),
    # the console: its page is public (it holds no data; without keys the console itself answers only
    # loopback), its data and controls are behind the key
    rule("GET", "/ui/api/live", KEY),
    rule("GET", "/ui/api/logs/{instance}", KEY),
    rule("GET", "/ui/api/bench", KEY),
    rule("GET", "/ui/api/bench/plot", KEY),
    rule("GET", "/ui", OPEN),
    rule("GET", "/", OPEN),
    rule("GET", "/ui/{name:path}", OPEN),
)
OLLAMA: tuple[Rule, ...] = (
    rule("GET", "/api/version", OPEN),  # clients probe it before anything else
    rule("GET", "/api/tags", KEY),
    rule("GET", "/api/ps", KEY),
    rule("POST", "/api/show", KEY),
)


def route_table(off: set[str]) -> RouteTable:
    """Every route of an endpoint serving the API families not in ``off`` (``{"ollama"}`` when
    ``server.ollama_api`` is false)."""
    apis = [rule("POST", adapter.path, KEY) for adapter in served(off)]
    return RouteTable([*apis, *OTHER, *(() if "ollama" in off else OLLAMA)])


def ungrouped(routes: Iterable[BaseRoute], table: RouteTable) -> list[str]:
    """``METHOD path`` of every route in ``routes`` (an app's) that no rule of ``table`` groups."""
    out = []
    for route in routes:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if path is None:
            out.append(repr(route))  # a mount or a route without a path: nothing can group it
            continue
        out += [f"{method} {path}" for method in sorted(methods or ()) if table.match(method, path) is None]
    return out
