"""ProxyMetrics: per-app registry, timings accounting, and the scrape-time supervisor collector."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from supervision_helpers import fake_spec, make_config

from orchestrator.serve.metrics import NO_MODEL, ProxyMetrics
from orchestrator.supervise.supervisor import ProcessState, Supervisor


def samples(metrics: ProxyMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def make(tmp_path: Path) -> tuple[ProxyMetrics, Supervisor]:
    supervisor = Supervisor([fake_spec()], make_config(), log_dir=tmp_path)
    return ProxyMetrics(supervisor, ["demo"]), supervisor


def test_timings_feed_tokens_speed_and_drafting(tmp_path: Path) -> None:
    metrics, _ = make(tmp_path)
    m = metrics.model("demo")
    m.timings({"prompt_n": 14, "predicted_n": 12, "predicted_per_second": 500.0})  # nothing drafted yet
    s = samples(metrics)
    assert s[("orchestrator_prompt_tokens_total", (("model", "demo"),))] == 14
    assert s[("orchestrator_completion_tokens_total", (("model", "demo"),))] == 12
    assert s[("orchestrator_decode_tokens_per_second_count", (("model", "demo"),))] == 1
    assert ("orchestrator_draft_acceptance_rate", (("model", "demo"),)) not in s  # undefined before drafting
    m.timings({"prompt_n": 1, "predicted_n": 12, "draft_n": 8, "draft_n_accepted": 6})
    m.timings({"prompt_n": 1, "predicted_n": 12, "draft_n": 8, "draft_n_accepted": 8})
    s = samples(metrics)
    assert s[("orchestrator_draft_tokens_total", (("model", "demo"),))] == 16
    assert s[("orchestrator_draft_accepted_tokens_total", (("model", "demo"),))] == 14
    assert s[("orchestrator_draft_acceptance_rate", (("model", "demo"),))] == 14 / 16


def test_requests_repairs_and_unknown_model_label(tmp_path: Path) -> None:
    metrics, _ = make(tmp_path)
    metrics.model("demo").request("chat", 200)
    metrics.model("demo").request("chat", 200)
    metrics.model(NO_MODEL).request("chat", 400)
    metrics.model("demo").repair("system_merged")
    s = samples(metrics)
    assert s[("orchestrator_requests_total", (("endpoint", "chat"), ("model", "demo"), ("status", "200")))] == 2
    assert s[("orchestrator_requests_total", (("endpoint", "chat"), ("model", "-"), ("status", "400")))] == 1
    assert s[("orchestrator_repairs_total", (("kind", "system_merged"), ("model", "demo")))] == 1


def test_instance_state_and_restarts_are_read_at_scrape_time(tmp_path: Path) -> None:
    metrics, supervisor = make(tmp_path)
    inst = supervisor.instances[0]
    labels = (("instance", "demo-0"), ("model", "demo"))
    s = samples(metrics)
    assert s[("orchestrator_instance_state", (*labels[:1], ("model", "demo"), ("state", "stopped")))] == 1
    inst.lifecycle.transition(ProcessState.READY)  # test only: the lifecycle task is the writer in production
    inst.lifecycle.restarts = 2
    s = samples(metrics)
    assert s[("orchestrator_instance_state", (*labels[:1], ("model", "demo"), ("state", "ready")))] == 1
    assert s[("orchestrator_instance_state", (*labels[:1], ("model", "demo"), ("state", "stopped")))] == 0
    assert s[("orchestrator_instance_restarts_total", labels)] == 2


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    a, _ = make(tmp_path / "a")
    b, _ = make(tmp_path / "b")
    a.model("demo").request("chat", 200)
    assert ("orchestrator_requests_total", (("endpoint", "chat"), ("model", "demo"), ("status", "200"))) not in samples(
        b
    )
