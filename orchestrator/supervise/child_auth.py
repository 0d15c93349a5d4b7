"""Locked children: with ``server.api_keys`` set, each llama-server takes a key of its own.

Without it, every child answers anyone on its own 127.0.0.1 port: any local user could send it
requests and read users' prompts from its ``/slots``. So when the endpoint has API keys, every
launch of every child gets a fresh random key (:func:`new_key`), handed over in the child's
environment as ``LLAMA_API_KEY`` (llama-server's ``--api-key`` from the environment: the key is
not in its command line, which ``ps`` shows to every user; ``/proc/<pid>/environ`` is readable
only by the same user and root). The orchestrator's own HTTP clients to children (the upstream
pool, the readiness and stall probes, the slot calls, the bench) carry :data:`CHILD_AUTH` (httpx)
or ask :func:`key_for` (the proxy's aiohttp sessions), which add the key of the child listening on
the request's host and port (:func:`register`, when the instance learns its port).

The child's environment also loses what is meant for others (:func:`secret_names`): the peers'
API key variables (``peers[].api_key_env``) and any inherited ``LLAMA_API_KEY`` /
``LLAMA_ARG_API_KEY_FILE``.

What other local users can still see: that the children run, their command lines (model path,
ports, flags) and their ports; llama-server's public ``/health`` answers without a key (at the
pin ``/v1/models``, ``/models`` and ``/api/tags`` ask for it too). Users' requests, prompts and
slots are behind the key. The same user (and root) can read the key from the child's environment.
"""

from __future__ import annotations

import secrets
from collections.abc import Generator
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from orchestrator.config.schema import Config

KEY_ENV = "LLAMA_API_KEY"
_keys: dict[tuple[str, int], str] = {}


def new_key() -> str:
    """A fresh key for one launch (256 bits)."""
    return secrets.token_urlsafe(32)


def locked(config: Config) -> bool:
    """Whether children get keys: the endpoint itself asks for one."""
    return bool(config.server.api_keys)


def secret_names(config: Config) -> set[str]:
    """Environment variables a child must not inherit."""
    names = {KEY_ENV, "LLAMA_ARG_API_KEY_FILE"}
    names.update(p.api_key_env for p in config.peers if p.api_key_env)
    return names


def register(base_url: str, key: str | None) -> None:
    """The child at ``base_url`` (``http://host:port``) takes ``key`` (None: no key, forget it)."""
    url = httpx.URL(base_url)
    where = (url.host, url.port or 80)
    if key is None:
        _keys.pop(where, None)
    else:
        _keys[where] = key


def key_for(host: str, port: int) -> str | None:
    """The key of the child listening at ``host:port`` (None: no key, or no child of ours there)."""
    return _keys.get((host, port))


class ChildLock:
    """One instance's key: a new one per launch (None when the endpoint has no keys)."""

    def __init__(self, config: Config) -> None:
        self.locked = locked(config)
        self.unset = tuple(sorted(secret_names(config)))  # our variables the child must not inherit
        self.key: str | None = None

    def launch(self, env: dict[str, str]) -> dict[str, str]:
        """A new key for the next launch; ``env`` with it added (the child's extra environment)."""
        self.key = new_key() if self.locked else None
        return {**env, KEY_ENV: self.key} if self.key else dict(env)

    def at(self, base_url: str | None) -> str | None:
        """The child listens at ``base_url``: requests there carry this launch's key. Returns it."""
        if base_url is not None:
            register(base_url, self.key)
        return base_url


class ChildAuth(httpx.Auth):
    """Adds the ``Authorization`` of the child a request goes to (none for any other address)."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        key = _keys.get((request.url.host, request.url.port or 80))
        if key is not None:
            request.headers["Authorization"] = f"Bearer {key}"
        yield request


CHILD_AUTH = ChildAuth()
