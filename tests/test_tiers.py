"""The tier check (``tests/tiers.py``): a test that reaches the build, an agent client or the
browser without its marker is named, with the marker it needs; collection then refuses the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.tiers import FAST_TIER, needed, unmarked


@dataclass
class FakeItem:
    nodeid: str
    fixturenames: list[str]
    marks: list[str] = field(default_factory=list)
    function: Any = None

    def iter_markers(self) -> list[pytest.Mark]:
        return [pytest.Mark(name, (), {}) for name in self.marks]


def calls_running_server() -> None:
    running_server()  # type: ignore[name-defined]  # noqa: F821  (only its name matters here)


def test_each_tier_is_known_by_its_fixtures_and_helpers() -> None:
    assert needed(["tmp_path"], []) == set()
    assert needed(["bin_info", "echo_model"], []) == {"native"}
    assert needed(["pinned_source"], []) == {"native"}
    assert needed(["agent_clients", "bin_info"], []) == {"agents", "native"}
    assert needed(["browser"], []) == {"browser"}
    assert needed([], ["running_server"]) == {"native"}
    assert FAST_TIER == "not native and not agents and not browser"


def test_a_test_without_its_marker_is_named_with_the_marker_it_needs() -> None:
    items = [
        FakeItem("t.py::marked", ["bin_info"], ["native"]),
        FakeItem("t.py::plain", ["tmp_path"]),
        FakeItem("t.py::server", ["llama_server"]),
        FakeItem("t.py::helper", [], function=calls_running_server),
        FakeItem("t.py::client", ["agent_clients", "bin_info"], ["native"]),
    ]
    assert unmarked(items) == [
        "t.py::server: needs @pytest.mark.native",
        "t.py::helper: needs @pytest.mark.native",
        "t.py::client: needs @pytest.mark.agents",
    ]


def test_this_suite_has_no_unmarked_test(request: pytest.FixtureRequest) -> None:
    """What collection checked, checked again on the collected session (the fast tier deselects the
    marked tests after the check, so every test of the suite went through it)."""
    assert unmarked(request.session.items) == []
