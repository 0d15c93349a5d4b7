"""The console's "Draft length per request" table in a real browser (Debian's chromium through
Playwright) against ``orchestrator up`` serving the demo model with ``speculative.adaptive``."""

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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (scripts/install.sh --test installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def test_each_request_shows_its_k_and_why(tmp_path: Path, bin_info: Any, demo_model: Path, browser: Any) -> None:
    extra = "    speculative: {type: draft-mtp, n_max: 3, adaptive: true}\n"
    config = write_models_yaml(tmp_path / "models.yaml", demo_model, extra=extra)
    with RunningUp(config, tmp_path / "state") as up:
        url = str(up.run["endpoint"])
        body = {"model": "demo", "prompt": "The quick brown fox jumps over", "max_tokens": 16, "temperature": 0}
        for _ in range(2):
            assert httpx.post(f"{url}/v1/completions", json=body, timeout=120, trust_env=False).status_code == 200
        context = browser.new_context(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url + "/")
        from playwright.sync_api import expect

        rows = page.locator('#drafts tr[data-model="demo"]')
        expect(rows.first).to_be_visible(timeout=30_000)
        assert rows.count() == 2
        texts = [rows.nth(i).inner_text() for i in range(2)]
        assert "completions/no-tools/<2K/latin" in texts[1] and "probe" in texts[1]  # oldest last
        assert rows.nth(1).get_attribute("data-k") == "3"
        assert "/" in texts[0]  # accepted/drafted of the answer
        assert errors == []
        context.close()
