"""The web console in a real browser (Debian's chromium driven by Playwright) against a real
``orchestrator up`` on the tiny model.

The browser is ``/usr/bin/chromium`` (``scripts/install.sh --test`` installs it); Playwright's own browser
download is never used. Every wait is on a page condition (``expect``/``wait_for_function``),
with generous bounds: the page polls every 2 s and the chart sampler ticks every 2 s.

Screenshots at a laptop and a phone width are written to ``docs/screenshots/`` (not committed; or
``$ORCHESTRATOR_SCREENSHOTS``); the README shows a copy of the laptop one (``docs/console.png``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from supervision_helpers import RunningUp, chat_body, write_models_yaml

pytestmark = [pytest.mark.native, pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(
    os.environ.get("ORCHESTRATOR_SCREENSHOTS") or Path(__file__).resolve().parents[3] / "docs" / "screenshots"
)
WAIT_MS = 30_000  # page conditions: several poll periods, and room for a loaded 2-core machine
LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
KEY = "console-test-key-7f3a"
BENCH_REPORT = Path(__file__).resolve().parents[2] / "data" / "bench_tiny"  # a real tiny-model bench report


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian chromium through Playwright's Python API."""
    if not CHROMIUM.exists():
        if os.environ.get("ORCHESTRATOR_REQUIRE_NATIVE") == "1":
            pytest.fail("no /usr/bin/chromium: run scripts/install.sh --test (ORCHESTRATOR_REQUIRE_NATIVE=1)")
        pytest.skip("no /usr/bin/chromium (scripts/install.sh --test installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, demo_model: Path) -> Iterator[RunningUp]:
    """One ``orchestrator up`` serving the demo model as ``demo``, shared by this module's tests."""
    work = tmp_path_factory.mktemp("console-up")
    config = write_models_yaml(work / "models.yaml", demo_model)
    shutil.copytree(BENCH_REPORT, work / "results")  # `orchestrator bench` writes results/ beside the config
    with RunningUp(config, work / "state") as running:
        yield running


class Page:
    """A page in a fresh browser context that records console errors and failed requests."""

    def __init__(self, browser: Any, url: str, viewport: dict[str, int], scheme: str = "light") -> None:
        self.context = browser.new_context(viewport=viewport, color_scheme=scheme)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[Any] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("request", lambda r: self.requests.append(r))
        self.page.goto(url + "/")

    def close(self) -> None:
        self.context.close()


@pytest.fixture()
def open_page(browser: Any) -> Iterator[Any]:
    pages: list[Page] = []

    def opener(url: str, viewport: dict[str, int] = LAPTOP, scheme: str = "light") -> Page:
        pages.append(Page(browser, url, viewport, scheme))
        return pages[-1]

    yield opener
    for p in pages:
        p.close()


def _expect() -> Any:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    return expect


def _card(page: Any) -> Any:
    return page.locator('article.model[data-model="demo"]')


def _replica_cell(page: Any, column: int) -> Any:
    return _card(page).locator('tr[data-instance="demo-0"] > *').nth(column)


def _chat(page: Any, text: str, thinking: str) -> Any:
    """Send ``text`` from the chat box; returns the new turn's locator once its stream ended."""
    page.select_option("#chat-thinking", thinking)
    page.fill("#chat-max", "48")
    page.fill("#chat-input", text)
    page.evaluate(
        """() => {
            // record the streamed text's length at every change of the newest turn
            if (window.__observer) window.__observer.disconnect();
            window.__answerLengths = [];
            const log = document.getElementById("chat-log");
            window.__observer = new MutationObserver(() => {
                const turn = log.querySelector(".turn:last-child");
                if (!turn) return;
                window.__answerLengths.push(turn.querySelector(".answer").textContent.length
                    + turn.querySelector(".reasoning-text").textContent.length);
            });
            window.__observer.observe(log, {subtree: true, childList: true, characterData: true});
        }"""
    )
    page.focus("#chat-input")
    page.keyboard.press("Control+Enter")  # the keyboard path to send
    turn = page.locator(".turn").last
    _expect()(turn.locator(".figures")).to_contain_text("tokens")  # figures appear when the stream ended
    return turn


def test_models_and_states_appear_without_console_errors(up: RunningUp, open_page: Any) -> None:
    p = open_page(str(up.run["endpoint"]))
    expect = _expect()
    expect(_card(p.page)).to_have_attribute("data-state", "ready")
    expect(_card(p.page).locator(".badge")).to_have_text("ready")
    pid = up.instance_pids()[0]
    expect(_replica_cell(p.page, 2)).to_have_text(str(pid))
    expect(_card(p.page).locator(".facts")).to_contain_text("CPU")
    expect(_card(p.page).locator(".facts")).to_contain_text("MiB")  # resident memory of the child
    assert p.page.locator("#key-prompt").is_hidden()
    assert p.errors == [], p.errors  # includes CSP violations, which Chromium reports as errors


def test_chat_streams_the_answer_and_shows_reasoning_apart_with_drafting_figures(up: RunningUp, open_page: Any) -> None:
    p = open_page(str(up.run["endpoint"]))
    expect = _expect()
    expect(p.page.locator("#chat-model")).to_have_value("demo")
    turn = _chat(p.page, "Hello there", thinking="off")
    answer = turn.locator(".answer").text_content() or ""
    assert answer.strip(), "no answer text"
    lengths = p.page.evaluate("() => window.__answerLengths")
    assert len({n for n in lengths if n > 0}) >= 3, f"the answer did not arrive in pieces: {lengths}"
    assert turn.locator(".reasoning").is_hidden()  # thinking off: no reasoning block
    figures = turn.locator(".figures").inner_text()
    assert re.search(r"drafted\s*:?\s*\d+", figures) and re.search(r"accepted\s*:?\s*\d+", figures), figures
    assert re.search(r"tokens per step\s*:?\s*[\d.]+", figures), figures

    turn = _chat(p.page, "Think first", thinking="on")
    reasoning = turn.locator(".reasoning-text").text_content() or ""
    assert reasoning.strip(), "reasoning was not shown"
    assert turn.locator(".reasoning").is_visible()
    # the tiny model never closes its thinking within 48 tokens: all of it is reasoning, none answer
    assert (turn.locator(".answer").text_content() or "") == ""
    assert "only reasoned" in (turn.locator(".turn-status").text_content() or "")
    assert p.errors == [], p.errors


def test_charts_receive_points_after_requests(up: RunningUp, open_page: Any) -> None:
    p = open_page(str(up.run["endpoint"]))
    expect = _expect()
    expect(_card(p.page)).to_have_attribute("data-state", "ready")
    with httpx.Client(base_url=str(up.run["endpoint"]), timeout=60, trust_env=False) as client:
        for i in range(3):
            r = client.post("/v1/chat/completions", json={**chat_body(f"chart {i}", 24), "model": "demo"})
            assert r.status_code == 200, r.text
    expect(p.page.locator('.latest[data-chart="decode_tps"]')).to_have_text(re.compile(r"demo: \d"))
    expect(p.page.locator('.latest[data-chart="acceptance"]')).to_have_text(re.compile(r"demo: \d+ %"))
    expect(p.page.locator('.latest[data-chart="ttft_s"]')).to_have_text(re.compile(r"demo: \d"))
    points = int(p.page.locator('figure[data-chart="rps"]').get_attribute("data-points") or 0)
    assert points >= 2
    p.page.wait_for_function(
        "(n) => Number(document.querySelector('figure[data-chart=rps]').dataset.points) > n",
        arg=points,
        timeout=WAIT_MS,
    )
    # the drawn chart holds a non-zero request rate for the requests above
    assert p.page.locator('figure[data-chart="rps"] canvas').count() == 1


def test_the_last_bench_report_shows_its_table_and_plot(up: RunningUp, open_page: Any) -> None:
    p = open_page(str(up.run["endpoint"]))
    expect = _expect()
    bench = p.page.locator("#bench")
    expect(bench).to_contain_text("recommended K = 0")
    expect(bench.locator("tbody tr")).to_have_count(2)  # K = 0 and K = 2 over the "general" prompts
    expect(bench.locator("tbody tr").nth(1)).to_contain_text("general")
    img = bench.locator("img.bench-plot")
    expect(img).to_have_attribute("src", re.compile(r"^blob:"))  # fetched with the key header, shown from memory
    p.page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=img.element_handle(), timeout=WAIT_MS)
    assert p.errors == [], p.errors


def test_log_tail_follows_new_lines(up: RunningUp, open_page: Any) -> None:
    p = open_page(str(up.run["endpoint"]))
    expect = _expect()
    expect(p.page.locator("#log")).to_contain_text("orchestrator: launch #")
    before = p.page.evaluate("() => document.getElementById('log').textContent.split('\\n').length")
    with httpx.Client(base_url=str(up.run["endpoint"]), timeout=60, trust_env=False) as client:
        assert client.post("/v1/chat/completions", json=chat_body("log me", 4)).status_code == 200
    p.page.wait_for_function(
        "(n) => document.getElementById('log').textContent.split('\\n').length > n", arg=before, timeout=WAIT_MS
    )
    assert "release" in (p.page.locator("#log").text_content() or "")  # llama-server's slot release line


LAUNCHES = "document.getElementById('log').textContent.split('===== orchestrator: launch #').length"


def test_restart_from_the_keyboard_replaces_the_process(up: RunningUp, open_page: Any) -> None:
    p = open_page(str(up.run["endpoint"]))
    expect = _expect()
    expect(_card(p.page)).to_have_attribute("data-state", "ready")
    old = _replica_cell(p.page, 2).text_content()
    assert old and old.isdigit()
    expect(p.page.locator("#log")).to_contain_text("orchestrator: launch #")
    launches = p.page.evaluate(f"() => {LAUNCHES}")
    p.page.get_by_role("button", name="Restart").focus()
    p.page.keyboard.press("Enter")
    expect(p.page.locator("#control-msg")).to_contain_text("restart demo: restarting")
    expect(_replica_cell(p.page, 2)).not_to_have_text(old)
    expect(_replica_cell(p.page, 2)).to_have_text(re.compile(r"^\d+$"))
    expect(_card(p.page)).to_have_attribute("data-state", "ready")
    # the log tail follows into the new process's lines: one more launch marker
    p.page.wait_for_function(f"(n) => {LAUNCHES} > n", arg=launches, timeout=WAIT_MS)
    assert p.errors == [], p.errors


def test_unload_then_load_changes_the_state_on_the_page(up: RunningUp, open_page: Any) -> None:
    p = open_page(str(up.run["endpoint"]))
    expect = _expect()
    card = _card(p.page)
    expect(card).to_have_attribute("data-state", "ready")
    load = card.get_by_role("button", name="Load", exact=True)
    unload = card.get_by_role("button", name="Unload", exact=True)
    expect(load).to_be_disabled()
    unload.click()
    expect(card).to_have_attribute("data-state", "unloaded")
    expect(_replica_cell(p.page, 2)).to_have_text("\u2013")  # an en dash: no process, no pid
    expect(load).to_be_enabled()
    expect(unload).to_be_disabled()
    load.click()
    expect(card).to_have_attribute("data-state", "ready")
    expect(_replica_cell(p.page, 2)).to_have_text(re.compile(r"^\d+$"))
    expect(p.page.locator("#control-msg")).to_contain_text("load demo: ready")
    # the lifecycle's figures: idle time and the time until the idle unload (ttl, 30 min by default)
    expect(card.locator(".facts")).to_contain_text("Idle for")
    expect(card.locator(".facts")).to_contain_text("Unloads in")
    assert p.errors == [], p.errors


def test_screenshots_at_laptop_and_phone_width(up: RunningUp, open_page: Any) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name, viewport, scheme in (("laptop", LAPTOP, "light"), ("phone", PHONE, "dark")):
        p = open_page(str(up.run["endpoint"]), viewport, scheme)
        expect = _expect()
        expect(_card(p.page)).to_have_attribute("data-state", "ready")
        _chat(p.page, "Hello", thinking="off")
        expect(p.page.locator('.latest[data-chart="decode_tps"]')).to_have_text(re.compile(r"demo: \d"))
        # nothing wider than the viewport: the page reflows at phone width
        width = p.page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= viewport["width"], f"{name}: page is {width} px wide in a {viewport['width']} px viewport"
        _assert_readable(p.page, scheme)
        out = SCREENSHOTS / f"console-{name}.png"
        p.page.screenshot(path=str(out), full_page=True)
        assert out.stat().st_size > 10_000
        assert p.errors == [], p.errors


# text and the background it is drawn on, as the page renders them (selectors of visible elements)
_TEXT_ON = (
    ("body", "body"),
    ("#models-title", "main > section"),
    (".model .facts dt", "main > section"),  # muted text
    (".model .badge", "main > section"),
    ('button[data-action="unload"]', 'button[data-action="unload"]'),
    ("#chat-clear", "main > section"),  # a quiet button: accent text on the card
    (".turn .figures dt", "main > section"),
    ("#log", "#log"),
)


def _luminance(rgb: tuple[float, ...]) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _assert_readable(page: Any, scheme: str) -> None:
    """Every kind of text on the page reaches WCAG AA contrast (4.5:1) against its background."""
    pairs = page.evaluate(
        """(pairs) => pairs.map(([fg, bg]) => [
            getComputedStyle(document.querySelector(fg)).color,
            getComputedStyle(document.querySelector(bg)).backgroundColor,
        ])""",
        [list(p) for p in _TEXT_ON],
    )
    for (fg_sel, bg_sel), (fg, bg) in zip(_TEXT_ON, pairs, strict=True):
        if bg_sel == "body" or "0, 0, 0, 0" in bg:  # transparent: the page background shows through
            bg = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        lf, lb = (_luminance(tuple(float(x) for x in re.findall(r"[\d.]+", c))) for c in (fg, bg))
        ratio = (max(lf, lb) + 0.05) / (min(lf, lb) + 0.05)
        assert ratio >= 4.5, f"{scheme}: {fg_sel} ({fg}) on {bg_sel} ({bg}) has contrast {ratio:.2f} < 4.5"


# ----------------------------------------------------------------------------- with an API key


@pytest.fixture(scope="module")
def up_with_key(
    tmp_path_factory: pytest.TempPathFactory, bin_info: Any, demo_model: Path, up: RunningUp
) -> Iterator[RunningUp]:
    """An ``up`` with an API key, and the other ``up`` as its peer (the page shows peers)."""
    work = tmp_path_factory.mktemp("console-key")
    peer = f"peers:\n  - name: lab\n    url: {up.run['endpoint']}\n"
    config = write_models_yaml(work / "models.yaml", demo_model, extra=peer)
    config.write_text(config.read_text().replace("server:\n", f"server:\n  api_keys: [{KEY}]\n", 1))
    with RunningUp(config, work / "state") as running:
        yield running


def test_with_an_api_key_the_page_shows_only_the_key_prompt(
    up_with_key: RunningUp, up: RunningUp, open_page: Any
) -> None:
    url = str(up_with_key.run["endpoint"])
    p = open_page(url)
    expect = _expect()
    expect(p.page.locator("#key-prompt")).to_be_visible()
    assert p.page.locator("#main").is_hidden()
    text = p.page.locator("body").inner_text()
    assert "demo" not in text and "ready" not in text, text  # nothing about the models leaks
    assert p.page.evaluate("() => document.activeElement.id") == "key-input"

    p.page.fill("#key-input", "wrong-key")
    p.page.keyboard.press("Enter")
    expect(p.page.locator("#key-error")).to_contain_text("refused")
    assert p.page.locator("#main").is_hidden()

    p.page.fill("#key-input", KEY)
    p.page.keyboard.press("Enter")
    expect(_card(p.page)).to_have_attribute("data-state", "ready")
    assert p.page.locator("#key-prompt").is_hidden()
    calls = [r for r in p.requests if "/ui/api/" in r.url or "/v1/" in r.url]
    authorised = [r for r in calls if r.headers.get("authorization") == f"Bearer {KEY}"]
    assert authorised, [r.url for r in calls]
    peer = p.page.locator('#peers tr[data-peer="lab"]')
    expect(peer).to_contain_text(str(up.run["endpoint"]))  # the other `up`, healthy, serving demo
    expect(peer.locator("td").nth(2)).to_have_text("yes")
    assert all("cookie" not in r.headers for r in p.requests)
    assert p.context.cookies() == []
    # the only errors are the refused calls before and with the wrong key
    assert all("401" in e for e in p.errors), p.errors
