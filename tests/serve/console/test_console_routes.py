"""The console's routes without a browser or a llama-server: who may see it, its headers, the
log follower, the bench report, the chart sampler and the restart route's input errors.

The app is the real ``create_app`` over a real ``Supervisor`` whose instance is never started
(nothing here needs a model); the browser tests in ``test_console.py`` cover the live page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from supervision_helpers import fake_spec

from orchestrator.config.schema import Config, ModelConfig, ServerConfig
from orchestrator.serve.app import create_app, served_by
from orchestrator.serve.console.access import CSP
from orchestrator.serve.console.files import FIRST_LINES, read_log
from orchestrator.serve.console.history import History
from orchestrator.serve.http.hosts import host_of, is_loopback
from orchestrator.serve.metrics import ProxyMetrics
from orchestrator.supervise.supervisor import Supervisor

LOCAL = "http://127.0.0.1:8080"


def _config(host: str = "127.0.0.1", keys: tuple[str, ...] = ()) -> Config:
    return Config(
        server=ServerConfig(host=host, api_keys=list(keys)),
        models=[ModelConfig(name="demo", path="/unused.gguf", aliases=["d"])],
    )


def _client(tmp_path: Path, config: Config, base_url: str = LOCAL) -> Iterator[TestClient]:
    supervisor = Supervisor([fake_spec()], config, log_dir=tmp_path / "logs")
    app = create_app(config, supervisor)
    served_by(app).console.bench_dirs = [tmp_path / "results"]
    with TestClient(app, base_url=base_url) as client:
        yield client


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from _client(tmp_path, _config())


def test_every_console_response_carries_the_csp(client: TestClient) -> None:
    root = client.get("/", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/ui/"
    for path in ("/ui/", "/ui/app.js", "/ui/style.css", "/ui/vendor/uPlot.iife.min.js", "/ui/api/live"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-security-policy"] == CSP, path
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "cookie" not in r.headers.get("set-cookie", "")
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
    assert client.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/ui/nope.js").status_code == 404
    assert client.get("/ui/vendor/README.md").status_code == 404  # notes are not served


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline: list[str] = []
        self.data_in_script = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {k for k, _ in attrs}
        if tag == "script":
            self.scripts.append(dict(attrs))
            self._in_script = True
        if tag == "style" or "style" in names or any(n.startswith("on") for n in names):
            self.inline.append(f"<{tag} {attrs}>")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.data_in_script += data.strip()


def test_the_page_has_no_inline_script_or_style(client: TestClient) -> None:
    tags = _Tags()
    tags.feed(client.get("/ui/").text)
    assert tags.scripts and all(s.get("src") for s in tags.scripts)
    assert tags.data_in_script == "" and tags.inline == []
    for name in ("app.js", "lib.js", "charts.js", "chat.js", "logs.js", "bench.js"):
        js = client.get(f"/ui/{name}").text
        # text only: server data is never parsed as HTML or code
        assert "innerHTML" not in js and "eval(" not in js and "new Function" not in js, name


def test_keyless_console_is_refused_on_a_non_loopback_bind(tmp_path: Path) -> None:
    for c in _client(tmp_path, _config(host="0.0.0.0")):
        for path in ("/", "/ui/", "/ui/api/live"):
            r = c.get(path, follow_redirects=False)
            assert r.status_code == 403, path
            assert r.json()["error"]["code"] == "console_needs_key"
            assert "server.api_keys" in r.json()["error"]["message"]
        assert c.get("/v1/models").status_code == 200  # the API itself is unchanged


def test_keyless_console_answers_only_a_loopback_host(client: TestClient) -> None:
    # DNS rebinding: a foreign page that re-points its name at 127.0.0.1 still sends its own Host
    # (the console's data is behind the route table's key group: without keys, its guard refuses the
    # foreign Host before the console's own check would)
    r = client.get("/ui/api/live", headers={"host": "attacker.example:8080"})
    assert r.status_code == 403 and "Host 'attacker.example:8080'" in r.json()["error"]["message"]
    page = client.get("/ui", headers={"host": "attacker.example:8080"})  # the page: the console's own rule
    assert page.status_code == 403 and "loopback Host" in page.json()["error"]["message"]
    for host in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080", "127.0.0.1"):
        assert client.get("/ui/api/live", headers={"host": host}).status_code == 200, host
    assert [is_loopback(host_of(h)) for h in ("[::1]:80", "localhost", "10.0.0.1:80", "::1")] == [
        True,
        True,
        False,
        True,
    ]


def test_with_keys_data_needs_the_header_and_the_page_is_public(tmp_path: Path) -> None:
    for c in _client(tmp_path, _config(host="0.0.0.0", keys=("k1",)), base_url="http://10.1.2.3:8080"):
        assert c.get("/ui/").status_code == 200  # static files hold no data
        for path in ("/ui/api/live", "/ui/api/logs/demo-0", "/ui/api/bench"):
            r = c.get(path)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", path
            assert c.get(path, headers={"authorization": "Bearer k1"}).status_code == 200, path
        assert c.get("/ui/api/live", cookies={"key": "k1"}).status_code == 401  # never a cookie
        r = c.post("/models/restart", json={"model": "demo"})
        assert r.status_code == 401


def test_restart_route_input_errors(client: TestClient) -> None:
    r = client.post("/models/restart", content=b'{"model": "demo"}', headers={"content-type": "text/plain"})
    assert r.status_code == 415  # a cross-site form cannot send JSON
    assert client.post("/models/restart", json=["demo"]).status_code == 400
    r = client.post("/models/restart", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = client.post("/models/restart", json={"model": "nope"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    for body in ({}, {"model": ""}, {"model": 5}):  # {} restarted the only model, as load/unload do not
        r = client.post("/models/restart", json=body)
        assert r.status_code == 400 and r.json()["error"]["code"] == "model_required", body


def test_log_route_follows_by_offset(client: TestClient, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "demo-0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("one\ntwo\nthr")
    first = client.get("/ui/api/logs/demo-0").json()
    assert first["lines"] == ["one", "two"]  # the unfinished line waits
    with open(log, "a") as f:
        f.write("ee\nfour\n")
    nxt = client.get(f"/ui/api/logs/demo-0?offset={first['offset']}").json()
    assert nxt["lines"] == ["three", "four"] and nxt["offset"] == log.stat().st_size
    assert client.get(f"/ui/api/logs/demo-0?offset={nxt['offset']}").json()["lines"] == []
    assert client.get("/ui/api/logs/other-0").status_code == 404
    assert client.get("/ui/api/logs/demo-0?offset=-1").status_code == 400
    assert client.get("/ui/api/logs/..%2F..%2Fetc%2Fpasswd").status_code == 404


def test_log_reader_starts_from_the_tail_mid_line_and_after_replacement(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"".join(b"line %06d\n" % i for i in range(40_000)))  # 480 kB: past the first window
    out = read_log(log, None)
    assert len(out["lines"]) == FIRST_LINES and out["lines"][-1] == "line 039999"
    assert all(re.fullmatch(r"line \d{6}", x) for x in out["lines"])  # no half line from the window start
    assert read_log(log, out["offset"] + 10**6)["lines"][-1] == "line 039999"  # file replaced: start over
    assert read_log(tmp_path / "missing.log", None) == {"offset": 0, "lines": [], "size": 0}


def test_bench_report_when_present(client: TestClient, tmp_path: Path) -> None:
    assert client.get("/ui/api/bench").json()["found"] is False
    assert client.get("/ui/api/bench/plot").status_code == 404
    results = tmp_path / "results"
    results.mkdir()
    summary = {
        "k": 0,
        "domain": "math",
        "requests": 3,
        "tps_median": 10.0,
        "ttft_median": 0.1,
        "acceptance": float("nan"),
        "tokens_per_step": 1.0,
        "speedup": float("nan"),
    }
    doc = {"model": "demo", "finished_at": "2026-01-01T00:00:00", "recommended_k": 2, "summary": [summary]}
    (results / "results.json").write_text(json.dumps(doc))  # json writes NaN, as the bench does
    (results / "sweep.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 64)
    body = client.get("/ui/api/bench").json()
    assert body["found"] and body["recommended_k"] == 2 and body["has_plot"]
    assert body["rows"][0]["speedup"] is None and body["rows"][0]["tps_median"] == 10.0
    plot = client.get("/ui/api/bench/plot")
    assert plot.status_code == 200 and plot.headers["content-type"] == "image/png"


def test_history_turns_counter_deltas_into_rates(tmp_path: Path) -> None:
    config = _config()
    supervisor = Supervisor([fake_spec()], config, log_dir=tmp_path)
    metrics = ProxyMetrics(supervisor, ["demo"])
    history = History(supervisor, metrics, interval=1.0, size=3)
    assert history.sample() is None  # the baseline
    idle = history.sample()
    assert idle is not None and idle["models"]["demo"]["rps"] == 0.0
    assert idle["models"]["demo"]["decode_tps"] is None and idle["models"]["demo"]["acceptance"] is None
    mm = metrics.model("demo")
    for _ in range(2):
        mm.request("chat", 200)
        mm.ttft.observe(0.5)
        mm.timings({"predicted_n": 40, "predicted_per_second": 20.0, "draft_n": 30, "draft_n_accepted": 24})
    mm.in_flight.inc(3)
    point = history.sample()
    assert point is not None
    m = point["models"]["demo"]
    assert m["rps"] > 0 and m["decode_tps"] == 20.0 and m["ttft_s"] == 0.5
    assert m["acceptance"] == pytest.approx(0.8)
    assert m["tokens_per_step"] == pytest.approx(80 / (80 - 48))  # steps = generated - accepted
    assert m["in_flight"] == 3 and m["queued"] == 2  # one slot (parallel 1), no replica serving
    history.waiting = lambda: {"demo": 4}  # held by the lifecycle while the model loads
    assert history.sample()["models"]["demo"]["queued"] == 6
    assert [p["seq"] for p in history.since(0)] == [1, 2, 3]  # the ring keeps `size` points
    history.sample()
    assert [p["seq"] for p in history.since(2)] == [3, 4] and history.last_seq == 4


def test_the_bench_fields_the_console_reads_are_the_ones_the_bench_writes() -> None:
    import dataclasses

    from orchestrator.bench.summary import Summary
    from orchestrator.serve.console.files import _SUMMARY_FIELDS, bench_summary

    assert set(_SUMMARY_FIELDS) <= {f.name for f in dataclasses.fields(Summary)}
    report = bench_summary(Path(__file__).resolve().parents[2] / "data" / "bench_tiny" / "results.json")
    assert report["found"] and report["model"] == "demo" and report["recommended_k"] == 0 and report["has_plot"]
    assert [r["k"] for r in report["rows"]] == [0, 2] and report["analysis"]
