"""``orchestrator bench``: statistics on literal numbers, prompts, the schedule, the report files,
and the whole command end to end on the tiny echo model (real llama-server)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestrator.bench import report as bench_report
from orchestrator.bench import summary as bench_summary
from orchestrator.bench.args import parse_int_list
from orchestrator.bench.plan import Variant, schedule
from orchestrator.bench.prompts import BUILTIN, builtin_prompts, load_prompts_file, select_prompts
from orchestrator.bench.requests import reported_n_max, request_body
from orchestrator.bench.stats import (
    Candidate,
    geometric_tokens_per_step,
    iqr,
    median,
    per_token_acceptance,
    recommend_k,
    speedup,
    step_cost,
    tokens_per_step,
)
from orchestrator.bench.summary import RequestResult, summarize
from orchestrator.errors import UserError

# --------------------------------------------------------------------------- statistics


def test_median_and_iqr_on_literal_numbers() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0, 3.0, 10.0]) == 2.5
    assert iqr([1.0, 2.0, 3.0]) == 1.0  # 2.5 - 1.5 with linear interpolation
    assert iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == 2.0  # 4 - 2
    assert iqr([7.0]) == 0.0
    assert math.isnan(median([])) and math.isnan(iqr([]))


def test_tokens_per_step_counts_verification_steps() -> None:
    # 100 tokens, 75 of them accepted drafts: 25 steps (each one model token + accepted drafts)
    assert tokens_per_step(100, 75) == 4.0
    assert tokens_per_step(10, 0) == 1.0  # no speculation: one token per step
    assert math.isnan(tokens_per_step(0, 0))
    with pytest.raises(ValueError):
        tokens_per_step(10, 11)


def test_geometric_expectation() -> None:
    assert geometric_tokens_per_step(0.5, 1) == 1.5
    assert geometric_tokens_per_step(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert geometric_tokens_per_step(1.0, 4) == 5.0  # perfect drafts: K + 1 per step
    assert geometric_tokens_per_step(0.0, 4) == 1.0
    assert geometric_tokens_per_step(0.9, 0) == 1.0
    with pytest.raises(ValueError):
        geometric_tokens_per_step(1.5, 2)


def test_per_token_acceptance_inverts_the_chain_rate() -> None:
    assert per_token_acceptance(0.8, 1) == 0.8
    # K=2, a=0.9: expected accepted per step 0.9 + 0.81 = 1.71 of 2 drafted
    assert per_token_acceptance(1.71 / 2, 2) == pytest.approx(0.9, abs=1e-9)
    assert per_token_acceptance(1.0, 4) == 1.0


def test_speedup_and_step_cost() -> None:
    assert speedup(150.0, 100.0) == 1.5
    assert math.isnan(speedup(1.0, 0.0))
    # 3 tokens per step at a 1.5x speedup: a step costs 2 baseline decode steps
    assert step_cost(3.0, 1.5) == 2.0
    # CPU, tiny model: 2.9 tokens per step yet 0.6x -> a step costs ~4.8 baseline steps
    assert step_cost(2.9, 0.6) == pytest.approx(4.8333, abs=1e-3)


def test_recommend_prefers_best_then_smaller_k_within_the_noise_band() -> None:
    cands = [Candidate(0, 100.0, 2.0), Candidate(2, 150.0, 3.0), Candidate(3, 152.0, 2.0), Candidate(4, 140.0, 1.0)]
    assert recommend_k(cands) == (2, 0.02)  # 150 is within 2% of 152
    cands = [Candidate(2, 140.0, 1.0), Candidate(3, 152.0, 1.0)]
    assert recommend_k(cands)[0] == 3  # 8% apart: a real difference
    # a noisy best widens the band: IQR 30 on 152 -> +-9.9%
    k, band = recommend_k([Candidate(2, 140.0, 1.0), Candidate(3, 152.0, 30.0)])
    assert (k, round(band, 4)) == (2, 0.0987)
    assert recommend_k([Candidate(0, 100.0, 0.0), Candidate(1, 60.0, 5.0)])[0] == 0


def _r(
    k: int, rep: int, predicted: int, ms: float, drafted: int, accepted: int, domain: str = "math", text: str = "t"
) -> RequestResult:
    return RequestResult(
        k=k,
        domain=domain,
        prompt_index=0,
        rep=rep,
        seed=0,
        ttft_s=0.01 * (rep + 1),
        prompt_ms=5.0,
        predicted_n=predicted,
        predicted_ms=ms,
        decode_tps=1000.0 * predicted / ms,
        drafted=drafted,
        accepted=accepted,
        n_max_effective=k or None,
        instance="x",
        text_sha1=text,
    )


def test_summarize_cells_speedup_and_geometric() -> None:
    rows = [
        _r(0, 0, 100, 1000.0, 0, 0),
        _r(0, 1, 100, 1250.0, 0, 0),
        _r(0, 2, 100, 500.0, 0, 0),  # 100, 80, 200 tok/s
        _r(1, 0, 100, 500.0, 50, 40),
        _r(1, 1, 100, 500.0, 50, 40),
        _r(1, 2, 100, 500.0, 50, 40),  # 200 tok/s
        _r(2, 0, 100, 400.0, 60, 50, text="other"),
        _r(2, 1, 100, 400.0, 60, 50),
        _r(2, 2, 100, 400.0, 60, 50),
    ]
    by_k = {s.k: s for s in summarize(rows)}
    assert set(by_k) == {0, 1, 2}
    b, one, two = by_k[0], by_k[1], by_k[2]
    assert (b.tps_median, b.tps_iqr, b.reps) == (100.0, 60.0, 3)  # IQR of 80, 100, 200: 150 - 90
    assert b.ttft_median == pytest.approx(0.02)
    assert one.acceptance == 0.8 and one.per_token_acceptance == 0.8
    assert one.tokens_per_step == pytest.approx(300 / 180)  # 300 tokens, 120 accepted
    assert one.mean_accepted == pytest.approx(120 / 180)
    assert one.speedup == 2.0
    assert one.step_cost == pytest.approx((300 / 180) / 2.0)
    assert one.geometric == pytest.approx(1.8)  # a = 0.8 from K=1
    assert two.geometric == pytest.approx(1 + 0.8 + 0.64)
    assert two.speedup == 2.5
    assert one.same_text_as_baseline is True and two.same_text_as_baseline is False


def test_noise_warning_above_a_quarter_iqr() -> None:
    quiet = summarize([_r(0, rep, 100, ms, 0, 0) for rep, ms in enumerate((1000.0, 1010.0, 990.0))])
    assert bench_summary.noise_warning(quiet, "math") is None
    noisy = summarize([_r(0, rep, 100, ms, 0, 0) for rep, ms in enumerate((1000.0, 2000.0, 500.0))])
    warning = bench_summary.noise_warning(noisy, "math")
    assert warning is not None and "IQR up to 75% of the median, at K=0" in warning


def test_summarize_adds_all_domain_and_recommend() -> None:
    rows = [
        _r(0, 0, 100, 1000.0, 0, 0, "math"),
        _r(0, 0, 100, 1000.0, 0, 0, "code"),
        _r(1, 0, 100, 800.0, 50, 45, "math"),
        _r(1, 0, 100, 2000.0, 50, 10, "code"),
    ]
    sums = summarize(rows)
    assert {s.domain for s in sums} == {"math", "code", "all"}
    assert bench_summary.recommend(sums, "math")[0] == 1
    assert bench_summary.recommend(sums, "code")[0] == 0
    all_k1 = next(s for s in sums if s.domain == "all" and s.k == 1)
    assert all_k1.tps_median == pytest.approx(200 / 2.8)  # pooled tokens / pooled decode time
    assert bench_summary.overall_domain(sums) == "all"


def test_analysis_line_says_why_speculation_loses() -> None:
    rows = [_r(0, 0, 100, 1000.0, 0, 0), _r(2, 0, 100, 2000.0, 80, 66)]
    s2 = next(s for s in summarize(rows) if s.k == 2)
    line = bench_report.analysis_line(s2, losing_band=0.02)
    assert line.startswith("K=2 [math]: 2.94 tokens/step measured vs")
    assert "speedup 0.50x" in line and "costs 5.88 baseline decode steps" in line
    assert "drafting is too expensive" in line and "tiny model" in line


def test_analysis_line_for_a_win_and_for_low_acceptance() -> None:
    win = summarize([_r(0, 0, 100, 1000.0, 0, 0), _r(3, 0, 100, 500.0, 90, 60)])
    assert "-> wins" in bench_report.analysis_line(next(s for s in win if s.k == 3), losing_band=0.02)
    # each drafted token costs 0.6 of a decode step: perfect acceptance would pay, 2 tokens/step do not
    part = summarize([_r(0, 0, 100, 1000.0, 0, 0), _r(4, 0, 100, 1700.0, 100, 50)])
    line = bench_report.analysis_line(next(s for s in part if s.k == 4), losing_band=0.02)
    assert "costs about 0.6 baseline decode steps" in line and "take 3.40 tokens/step of the possible 5" in line
    low = summarize([_r(0, 0, 100, 1000.0, 0, 0), _r(3, 0, 100, 1100.0, 90, 9)])
    assert "acceptance is low (0.10)" in bench_report.analysis_line(next(s for s in low if s.k == 3), losing_band=0.02)


def test_report_files(tmp_path: Path) -> None:
    rows = [
        _r(k, rep, 64, 500.0 + 10 * k + rep, 20 * k, 15 * k, d)
        for k in (0, 1, 2)
        for rep in (0, 1)
        for d in ("math", "code")
    ]
    rows = [dataclass_replace(r, drafted=0, accepted=0) if r.k == 0 else r for r in rows]
    sums = summarize(rows)
    bench_report.write_csv(tmp_path / "summary.csv", sums)
    bench_report.write_csv(tmp_path / "requests.csv", rows)
    bench_report.write_plot(tmp_path / "sweep.png", sums, title="t")
    bench_report.write_json(tmp_path / "r.json", {"x": float("nan"), "s": [1.0]})
    with (tmp_path / "summary.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 9 and {"k", "domain", "tps_median", "speedup", "step_cost"} <= set(table[0])
    with (tmp_path / "requests.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 12
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "r.json").read_text()) == {"x": None, "s": [1.0]}


def dataclass_replace(r: RequestResult, **kw: int) -> RequestResult:
    import dataclasses

    return dataclasses.replace(r, **kw)


# --------------------------------------------------------------------------- prompts and plan


def test_builtin_prompt_sets() -> None:
    prompts = builtin_prompts("math,code,general")
    assert {p.domain for p in prompts} == {"math", "code", "general"}
    assert all(len(BUILTIN[d]) >= 3 for d in BUILTIN)
    with pytest.raises(UserError) as err:
        builtin_prompts("math,poetry")
    assert "poetry" in str(err.value)


def test_prompts_file_and_bad_lines(tmp_path: Path) -> None:
    good = tmp_path / "p.jsonl"
    good.write_text(
        '{"domain": "law", "prompt": "What is a tort?"}\n\n{"domain": "law", "prompt": "Define estoppel."}\n'
    )
    assert [p.domain for p in load_prompts_file(good)] == ["law", "law"]
    assert [p.domain for p in select_prompts("math,code,general", good)] == ["law", "law"]
    assert {p.domain for p in select_prompts("math", good)} == {"math", "law"}
    bad = tmp_path / "bad.jsonl"
    for text, where, what in [
        ('{"domain": "a", "prompt": "x"}\n{"domain": "a", "prompt": \n', ":2:", "not valid JSON"),
        ('{"domain": "a", "prompt": "x"}\n\n["a"]\n', ":3:", "expected a JSON object"),
        ('{"domain": "", "prompt": "x"}\n', ":1:", "'domain' must be a non-empty string"),
        ('{"domain": "a", "prompt": "x", "n": 1}\n', ":1:", "unknown key(s) n"),
    ]:
        bad.write_text(text)
        with pytest.raises(UserError) as err:
            load_prompts_file(bad)
        assert where in str(err.value) and what in str(err.value)


@pytest.mark.native
def test_bench_user_mistakes_in_files_are_one_line_errors(tmp_path: Path, bin_info, demo_model) -> None:  # type: ignore[no-untyped-def]
    """A prompts file that is not UTF-8 and an --out that cannot be created: exit 2 and the
    option named, never a traceback (both were tracebacks)."""
    import subprocess
    import sys

    cfg = tmp_path / "models.yaml"
    cfg.write_text(f"models:\n  - name: d\n    path: {demo_model}\n")
    latin1 = tmp_path / "p.jsonl"
    latin1.write_bytes('{"domain": "a", "prompt": "caf\u00e9"}\n'.encode("latin-1"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    base = [sys.executable, "-m", "orchestrator.cli.app", "bench", "-c", str(cfg), "--k", "0", "--reps", "1"]
    for extra, expected in [
        (["--prompts-file", str(latin1)], "--prompts-file"),
        (["--out", str(blocker / "results")], "--out: cannot create"),
    ]:
        result = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120)
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
        assert result.returncode == 2 and expected in result.stderr, result.stderr


def test_parse_k_list() -> None:
    assert parse_int_list("4, 0,2,2", option="--k") == [0, 2, 4]
    with pytest.raises(UserError):
        parse_int_list("1,x", option="--k")
    with pytest.raises(UserError):
        parse_int_list("-1", option="--k")


def test_request_body_carries_k_only_per_request() -> None:
    body = request_body("p", k=3, per_request=True, n_min=1, n_predict=8, temperature=0.0, seed=1)
    assert body["speculative.n_max"] == 3 and body["speculative.n_min"] == 1 and body["cache_prompt"] is False
    assert "speculative.n_max" not in request_body(
        "p", k=3, per_request=False, n_min=1, n_predict=8, temperature=0.0, seed=1
    )
    assert "speculative.n_max" not in request_body(
        "p", k=0, per_request=True, n_min=1, n_predict=8, temperature=0.0, seed=1
    )
    assert reported_n_max({"speculative.n_max": 2}) == 2
    assert reported_n_max({"speculative": {"n_max": 4}}) == 4
    assert reported_n_max({"speculative.types": "draft-mtp"}) is None


def test_schedule_interleaves_every_k_each_round() -> None:
    spec = Variant(spec=None, ks=(1, 2, 4), per_request=True)  # type: ignore[arg-type]
    base = Variant(spec=None, ks=(0,))  # type: ignore[arg-type]
    together = schedule([spec, base], n_prompts=2, reps=2, seeds=[0], together=True)
    assert len(together) == 2 * 2 * 4
    first = together[:4]
    assert sorted(t.k for t in first) == [0, 1, 2, 4] and {t.prompt_index for t in first} == {0}
    assert [t.k for t in together[:4]] != [t.k for t in together[4:8]]  # rotated per prompt
    assert all(t.variant == (1 if t.k == 0 else 0) for t in together)
    one_at_a_time = schedule([spec, base], n_prompts=2, reps=3, seeds=[0, 1], together=False)
    runs = [t.variant for t in one_at_a_time]
    blocks = [v for i, v in enumerate(runs) if i == 0 or runs[i - 1] != v]
    assert blocks == [0, 1, 0, 1]  # snake order A B | B A | A B: reps + 1 loads, not 2 x reps
    assert len(one_at_a_time) == 3 * 2 * 2 * 4


# --------------------------------------------------------------------------- end to end


@pytest.mark.native
@pytest.mark.slow
def test_bench_end_to_end_on_the_echo_model(tmp_path: Path, bin_info, echo_model) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from orchestrator.cli.app import app
    from orchestrator.config.load import load_config

    cfg = tmp_path / "models.yaml"
    cfg.write_text(
        "# bench test config\n"
        "models:\n"
        "  - name: echo   # the q=0 echo model\n"
        f"    path: {echo_model}\n"
        "    ctx_size: 1024\n"
        "    threads: 1\n"
        "    speculative:\n"
        "      n_max: 3   # K\n"
    )
    out = tmp_path / "results"
    env = {"ORCHESTRATOR_BIN_DIR": str(bin_info.bin_dir)}
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--config",
            str(cfg),
            "--k",
            "0,1,2",
            "--reps",
            "1",
            "--n-predict",
            "32",
            "--prompts",
            "math",
            "--out",
            str(out),
            "--apply",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert (out / "summary.csv").is_file() and (out / "requests.csv").is_file()
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    reqs = data["requests"]
    n_prompts = len(BUILTIN["math"])
    assert len(reqs) == 3 * n_prompts
    by_k = {k: [r for r in reqs if r["k"] == k] for k in (0, 1, 2)}
    assert all(r["drafted"] == 0 for r in by_k[0])
    for k in (1, 2):
        # q=0: every draft is accepted
        assert all(r["drafted"] > 0 and r["accepted"] == r["drafted"] for r in by_k[k])
    # greedy output is the same with and without speculation
    assert {r["text_sha1"] for r in by_k[0]} == {r["text_sha1"] for r in by_k[1]} == {r["text_sha1"] for r in by_k[2]}
    assert data["settings"]["mode"] in ("per-request", "relaunch")
    assert data["manifest"]["model"]["header_sha256"]
    assert len(data["analysis"]) == 2 and data["analysis"][0].startswith("K=1 [math]:")
    assert "baseline decode steps" in data["analysis"][0]
    assert "analysis" in result.output and "recommended K =" in result.output
    best = data["recommended_k"]
    spec = load_config(cfg).model("echo").speculative
    if best == 0:
        assert spec.type == "none"
    else:
        assert spec.n_max == best
    assert cfg.read_text().startswith("# bench test config\n") and "# the q=0 echo model" in cfg.read_text()


@pytest.mark.native
@pytest.mark.slow
def test_bench_relaunch_per_k_without_the_patch(tmp_path: Path, bin_info, echo_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Without the per-request patch every K gets its own llama-server (--spec-draft-n-max K)."""
    from orchestrator.bench.runner import Sweep
    from orchestrator.bench.stats import perfect_draft_counts
    from orchestrator.cli.bench import run_bench

    async def unpatched(self, v, inst):  # type: ignore[no-untyped-def]
        return False  # what the probe answers on a build without 0002-per-request-draft-length

    monkeypatch.setattr(Sweep, "_probe_patch", unpatched)
    monkeypatch.setenv("ORCHESTRATOR_BIN_DIR", str(bin_info.bin_dir))
    cfg = tmp_path / "models.yaml"
    cfg.write_text(f"models:\n  - name: echo\n    path: {echo_model}\n    ctx_size: 512\n    threads: 1\n")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"domain": "chat", "prompt": "Hello there"}\n')
    out = tmp_path / "results"
    code = run_bench(
        None,
        config=cfg,
        k="0,1,3",
        prompts="math,code,general",
        prompts_file=prompts,
        n_predict=24,
        reps=2,
        seeds="0",
        temperature=0.0,
        out=out,
        apply=False,
    )
    assert code == 0
    data = json.loads((out / "results.json").read_text())
    assert data["settings"]["mode"] == "relaunch"
    by_instance = {(r["k"], r["instance"]) for r in data["requests"]}
    assert by_instance == {(0, "echo-bench-k0"), (1, "echo-bench-k1"), (3, "echo-bench-spec")}
    for r in data["requests"]:
        assert r["domain"] == "chat"
        if r["k"]:
            # each instance drafts exactly what its launch n_max allows (q = 0: all accepted)
            assert r["accepted"] == r["drafted"] == perfect_draft_counts(24, r["k"])[1]
    assert "K=3 [chat]:" in data["analysis"][1]


def test_sweep_script_is_valid_bash_and_runs_the_whole_pipeline() -> None:
    import subprocess

    script = Path(__file__).resolve().parents[2] / "scripts" / "sweep_draft_length.sh"
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    text = script.read_text()
    for step in (
        'orchestrator build "${build_args[@]}"',
        'orchestrator inspect "$GGUF"',
        'orchestrator bench "${bench_args[@]}"',
        "--apply",
    ):
        assert step in text


@pytest.mark.native
@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured(tmp_path: Path, bin_info, echo_model, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C during a sweep (SIGINT, raised right after the 4th measured request, so the 5th is
    cut): the 4 requests measured (every K at least once) are analysed, printed and saved,
    --apply does not touch models.yaml, and the exit code is 130. Ctrl-C before every K was
    measured leaves nothing to compare: no results, the interrupt goes on."""
    import signal

    from orchestrator.cli import bench as bench_cli

    real = bench_cli._progress_bar

    def interrupting(after: int) -> Any:
        @contextmanager
        def bar() -> Iterator[Any]:
            with real() as progress:
                advance, done = progress.advance, [0]

                def advance_then_interrupt() -> None:
                    advance()
                    done[0] += 1
                    if done[0] == after:
                        signal.raise_signal(signal.SIGINT)  # what Ctrl-C sends

                progress.advance = advance_then_interrupt
                yield progress

        return bar

    # A terminal's Ctrl-C meets Python's own SIGINT handler (asyncio.run then cancels the sweep);
    # a job started in the background by a non-interactive shell inherits SIGINT ignored instead.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_sweeps(tmp_path, echo_model, bin_info, monkeypatch, interrupting)
    finally:
        signal.signal(signal.SIGINT, previous)
    # (the figures are checked in _interrupt_sweeps) what each Ctrl-C left behind:
    assert (tmp_path / "partial" / "results.json").is_file() and not (tmp_path / "early" / "results.json").exists()


def _interrupt_sweeps(tmp_path: Path, echo_model: Path, bin_info: Any, monkeypatch: Any, interrupting: Any) -> None:
    from orchestrator.cli import bench as bench_cli
    from orchestrator.cli.bench import run_bench

    cfg = tmp_path / "models.yaml"
    cfg.write_text(f"models:\n  - name: echo\n    path: {echo_model}\n    ctx_size: 1024\n    threads: 1\n")
    before = cfg.read_text()
    monkeypatch.setenv("ORCHESTRATOR_BIN_DIR", str(bin_info.bin_dir))
    args = {"config": cfg, "k": "0,2", "prompts": "math", "prompts_file": None, "n_predict": 16, "reps": 1,
            "seeds": "0", "temperature": 0.0, "apply": True}  # fmt: skip
    monkeypatch.setattr(bench_cli, "_progress_bar", interrupting(4))
    assert run_bench(None, out=tmp_path / "partial", **args) == 130
    data = json.loads((tmp_path / "partial" / "results.json").read_text())
    assert len(data["requests"]) == 4 and {r["k"] for r in data["requests"]} == {0, 2}
    assert data["settings"]["interrupted"] is True
    assert any(w.startswith("interrupted (Ctrl-C) after 4 of") for w in data["warnings"])
    assert cfg.read_text() == before  # --apply skipped

    monkeypatch.setattr(bench_cli, "_progress_bar", interrupting(1))
    with pytest.raises(KeyboardInterrupt):
        run_bench(None, out=tmp_path / "early", **args)
    assert not (tmp_path / "early" / "results.json").exists()
