"""Who may call a route: each route's auth group, and the one place the key is checked.

``orchestrator.serve.routes`` declares every route with its group; :class:`Guard` (ASGI middleware,
inside CORS and in front of everything else) finds the request's route and applies its group:

- ``open``: no key (``/health`` and ``/metrics`` unless ``server.auth_health`` /
  ``server.auth_metrics``; the console's static page; the connectivity probe);
- ``key``: the API keys (``server.api_keys``), or without keys the keyless guard against other
  sites' web pages (``ApiKeys.check``): every API, the listings, ``/status``, the console's data;
- ``admin``: what changes what runs (load, unload, reload, restart). The same keys as ``key``
  today; the group is where a key of its own would be asked for.

No handler checks a key itself. A request for a route the table does not know (a 404, a 405)
passes on to the router, which answers it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.errors import ApiError
from orchestrator.serve.http.auth import ApiKeys

# (the request's ASGI scope, the refusal) -> the response in the route's API shape
Refusal = Callable[[Scope, ApiError], Response]


class Group(enum.StrEnum):
    OPEN = "open"
    KEY = "key"
    ADMIN = "admin"


@dataclass(frozen=True)
class Rule:
    """One route: its methods, its path (a Starlette path template) and its group. ``unless`` names
    a ``server`` setting that, when true, puts an ``open`` route behind the key."""

    methods: frozenset[str]
    path: str
    group: Group
    unless: str | None = None

    def __post_init__(self) -> None:
        if self.unless is not None and self.group is not Group.OPEN:
            raise ValueError(f"{self.path}: only an open route can be keyed by a setting")


def rule(methods: str, path: str, group: Group, unless: str | None = None) -> Rule:
    """``rule("GET|HEAD", "/health", Group.OPEN, unless="auth_health")``."""
    return Rule(frozenset(methods.split("|")), path, group, unless)


class RouteTable:
    """Every route with its group; the first rule whose method and path match decides."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = tuple(rules)
        self._compiled: list[tuple[re.Pattern[str], Rule]] = [(compile_path(r.path)[0], r) for r in self.rules]

    def match(self, method: str, path: str) -> Rule | None:
        """The rule of ``method path``, or None when no route serves it."""
        for pattern, r in self._compiled:
            if method in r.methods and pattern.match(path):
                return r
        return None

    def paths(self) -> Sequence[tuple[str, str]]:
        """``(METHOD, path)`` of every rule, as the router would list them."""
        return [(m, r.path) for r in self.rules for m in sorted(r.methods)]


class Guard:
    """ASGI middleware: refuse a request its route's group does not let in, in its API's shape.

    Args:
        app: the rest of the app.
        table: the routes and their groups.
        keys: the running config's keys (``ApiKeys.following``).
        setting: a ``server`` setting's current value by name (``auth_health``, ``auth_metrics``).
        refuse: the refusal as a response (the route's API error shape, counted in the metrics).
    """

    def __init__(
        self, app: ASGIApp, table: RouteTable, keys: ApiKeys, setting: Callable[[str], bool], refuse: Refusal
    ) -> None:
        self.app = app
        self.table = table
        self.keys = keys
        self.setting = setting
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            r = self.table.match(scope["method"], scope["path"])
            if r is not None and (r.group is not Group.OPEN or (r.unless and self.setting(r.unless))):
                try:
                    self.keys.check(scope["headers"])
                except ApiError as err:
                    await self.refuse(scope, err)(scope, receive, send)
                    return
        await self.app(scope, receive, send)
