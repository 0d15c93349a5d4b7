"""The console's "Prompt cache per session" table in a real browser (Debian's chromium through
Playwright) against ``orchestrator up`` serving the demo model: a session's requests and how much of
their prompts came from the cache, beside ``/status``'s ``kv.sessions``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from supervision_helpers import RunningUp, write_models_yaml

pytestmark = [pytest.mark.native, pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
SYSTEM = "You are a careful coding agent working in a large repository. " * 20


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (scripts/install.sh --test installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def test_a_session_shows_its_cache_hits(tmp_path: Path, bin_info: Any, demo_model: Path, browser: Any) -> None:
    config = write_models_yaml(tmp_path / "models.yaml", demo_model)
    with RunningUp(config, tmp_path / "state") as up:
        url = str(up.run["endpoint"])
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the parser"}]
        body = {"model": "demo", "messages": messages, "max_tokens": 8, "temperature": 0, "prompt_cache_key": "s1"}
        for _ in range(2):  # the same request twice: the second finds its prompt cached
            assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120, trust_env=False).status_code == 200
        status = httpx.get(f"{url}/status", timeout=30, trust_env=False).json()
        (mine,) = [s for s in status["models"][0]["kv"]["sessions"] if s["session"] == "k:s1"]
        assert mine["requests"] == 2 and mine["cached_tokens"] > 0
        context = browser.new_context(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url + "/")
        from playwright.sync_api import expect

        rows = page.locator('#sessions tr[data-model="demo"]')
        expect(rows.first).to_be_visible(timeout=30_000)
        text = rows.first.inner_text()
        assert "k:s1" in text and f"{round(100 * mine['hit_rate'])}%" in text, text
        assert errors == []
        context.close()
