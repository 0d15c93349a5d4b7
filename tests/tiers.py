"""The suite's tiers, and the check that keeps them honest.

- ``native``: needs the pinned llama.cpp, built or as source: a real llama-server (``bin_info``,
  the ``llama_server`` factory, ``tests/native_server.py``'s helpers called from a test or
  fixture), or the pinned tree's vocabulary and template that every generated tiny model is made
  of (``pinned_source``: those tests write GGUFs, tens of seconds of numpy between them).
- ``agents``: runs a real agent client (the ``agent_clients`` fixture).
- ``browser``: drives the real chromium (the ``browser`` fixture).

``python -m pytest -m "not native and not agents and not browser"`` is the fast tier: it needs no
llama.cpp (built or downloaded), no npm and no browser, and is what to run while editing. A test
that reaches one of these parts without its marker would run (and fail, or stall) in the fast
tier, so collection refuses it (``tests/conftest.py`` calls :func:`unmarked` on every collected
test).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TIERS: dict[str, frozenset[str]] = {
    "native": frozenset({"bin_info", "llama_server", "pinned_source"}),
    "agents": frozenset({"agent_clients"}),
    "browser": frozenset({"browser"}),
}
# tests/native_server.py starts llama-server without a fixture; a test or fixture calling these
# needs the build as much as one asking for ``bin_info``.
NATIVE_HELPERS = frozenset({"native_build", "running_server"})
FAST_TIER = " and ".join(f"not {name}" for name in TIERS)


def needed(fixtures: Iterable[str], names_called: Iterable[str]) -> set[str]:
    """The tiers a test belongs to, from its fixture closure and the global names its code calls."""
    fixtures, names = set(fixtures), set(names_called)
    tiers = {tier for tier, wanted in TIERS.items() if fixtures & wanted}
    if names & NATIVE_HELPERS:
        tiers.add("native")
    return tiers


def _names_called(item: Any) -> set[str]:
    """Global names in the test function and in every fixture function it uses."""
    funcs = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        funcs.extend(d.func for d in defs)
    names: set[str] = set()
    for func in funcs:
        code = getattr(func, "__code__", None)
        if code is not None:
            names.update(code.co_names)
    return names


def unmarked(items: Iterable[Any]) -> list[str]:
    """``"nodeid: needs MARK"`` for every test that reaches a tier's part without the tier's marker."""
    problems = []
    for item in items:
        have = {mark.name for mark in item.iter_markers()}
        missing = needed(getattr(item, "fixturenames", ()), _names_called(item)) - have
        if missing:
            problems.append(f"{item.nodeid}: needs @pytest.mark.{', @pytest.mark.'.join(sorted(missing))}")
    return problems
