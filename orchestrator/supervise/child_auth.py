"""Locked children: with ``server.api_keys`` set, each llama-server takes a key of its own.

Without it, every child answers anyone on its own 127.0.0.1 port: any local user could send it
requests and read users' prompts from its ``/slots``. So when the endpoint has API keys, every
launch of every child gets a fresh random key (:func:`new_key`), handed over in the child's
environment as ``LLAMA_API_KEY`` (llama-server's ``--api-key`` from the environment: the key is
not in its command line, which ``ps`` shows to every user; ``/proc/<pid>/environ`` is readable
only by the same user and root). The key rides on the ``Instance`` that owns the child (its
:class:`ChildLock`): the orchestrator's own HTTP clients to that child (the proxy's upstream, the
readiness and stall probes, the slot calls, the bench) take it from there (:meth:`ChildLock.auth`
for httpx, :meth:`ChildLock.current` for the proxy's aiohttp sessions); nothing keeps keys by
address.

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

    def current(self) -> str | None:
        """The running launch's key (None: the child takes none)."""
        return self.key

    @property
    def auth(self) -> httpx.Auth:
        """httpx auth that sends the running launch's key (read at each request: a restart's new
        key applies to the next one)."""
        return _LockAuth(self)


class _LockAuth(httpx.Auth):
    def __init__(self, lock: ChildLock) -> None:
        self._lock = lock

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self._lock.key is not None:
            request.headers["Authorization"] = f"Bearer {self._lock.key}"
        yield request
