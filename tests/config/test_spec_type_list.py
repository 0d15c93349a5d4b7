"""``speculative.type`` as a list (``[draft-mtp, ngram-mod]``): the schema, the argv, ``up --dry-run``
and a real ``orchestrator up`` serving with both drafters on."""

from __future__ import annotations

import textwrap
from pathlib import Path

import httpx
import psutil
import pytest
from supervision_helpers import RunningUp, write_models_yaml

from orchestrator.cli.up import run_up
from orchestrator.config.load import load_config
from orchestrator.config.problems import ConfigError
from orchestrator.config.spec_types import drafters
from orchestrator.launch.argv import Speculation, _speculation

BOTH = "draft-mtp,ngram-mod"


def _load(tmp_path: Path, speculative: str) -> object:
    path = tmp_path / "models.yaml"
    path.write_text(f"models:\n  - name: q\n    path: q.gguf\n    speculative: {speculative}\n")
    return load_config(path).models[0].speculative


@pytest.mark.parametrize(
    "spelling",
    ["[draft-mtp, ngram-mod]", "[ngram-mod, mtp]", "'draft-mtp,ngram-mod'", "[MTP, ngram_mod, ngram-mod]"],
)
def test_a_list_of_drafters_is_one_comma_separated_type_in_the_pins_order(tmp_path: Path, spelling: str) -> None:
    spec = _load(tmp_path, f"{{type: {spelling}}}")
    assert spec.type == BOTH  # type: ignore[attr-defined]
    assert drafters(BOTH) == ("draft-mtp", "ngram-mod") and drafters("none") == () and drafters(None) == ()


def test_ngram_mod_alone_and_its_settings(tmp_path: Path) -> None:
    spec = _load(tmp_path, "{type: ngram-mod, ngram_mod: {n_match: 16, n_min: 2, n_max: 8}}")
    assert spec.type == "ngram-mod"  # type: ignore[attr-defined]
    assert (spec.ngram_mod.n_match, spec.ngram_mod.n_min, spec.ngram_mod.n_max) == (16, 2, 8)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("speculative", "where", "says"),
    [
        ("{type: [draft-mtp, eagle]}", "speculative.type", "unknown drafter 'eagle'"),
        ("{type: draft-mtp, ngram_mod: {n_min: 2}}", "speculative.ngram_mod", "does not list ngram-mod"),
        ("{type: ngram-mod, ngram_mod: {n_max: 2000}}", "speculative.ngram_mod.n_max", "less than or equal to 1024"),
        ("{type: ngram-mod, ngram_mod: {n_min: true}}", "speculative.ngram_mod.n_min", "integer"),
        ("{type: none, adaptive: true}", "speculative.adaptive", "is set but speculative.type is none"),
    ],
)
def test_bad_drafter_settings_name_the_key(tmp_path: Path, speculative: str, where: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, speculative)
    text = str(err.value)
    assert f"models[0].{where}" in text and says in text, text


def test_argv_carries_the_list_and_the_ngram_settings() -> None:
    argv = _speculation(Speculation(BOTH, 3, 1, ngram_mod=(24, 4, 16)))
    assert argv[:2] == ("--spec-type", BOTH)
    assert argv[-6:] == (
        "--spec-ngram-mod-n-match", "24", "--spec-ngram-mod-n-min", "4", "--spec-ngram-mod-n-max", "16",
    )  # fmt: skip


@pytest.mark.native
def test_dry_run_shows_both_drafters(tmp_path: Path, bin_info, demo_model, capsys, monkeypatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_STATE", str(tmp_path / "state"))
    extra = "    speculative: {type: [draft-mtp, ngram-mod], ngram_mod: {n_match: 8, n_min: 1, n_max: 8}}\n"
    config = write_models_yaml(tmp_path / "models.yaml", demo_model, extra=extra)
    assert run_up(config, dry_run=True, force=False) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"--spec-type {BOTH}" in out and "--spec-ngram-mod-n-match 8" in out


def _copy_prompts() -> tuple[list[int], list[int]]:
    """Two prompts for the demo echo model (q = 0.1; its answer counts through the vocabulary):
    a passage of 24 answer tokens holding tokens whose MTP draft is wrong, then a break, then
    the passage's first 4 tokens again (the answer copies the passage: the n-gram drafter's
    case); and the passage's first token alone (the answer is the same passage, drafted by the
    head alone)."""
    from orchestrator.models.tiny import load_echo_map

    m = load_echo_map(0.1)
    for start in m.clean[1000:]:
        seq = [int(start)]
        for _ in range(28):
            seq.append(int(m.successor[seq[-1]]))
        if m.flagged[seq[4:20]].sum() >= 3:
            return [*seq[:24], int(m.clean[50]), *seq[:4]], seq[3:4]
    raise AssertionError("no passage with flagged tokens")


@pytest.mark.native
def test_both_drafters_launch_and_serve(tmp_path: Path, bin_info, demo_model) -> None:
    """One llama-server with both drafters, through our endpoint: where the answer repeats the
    context, the n-gram drafter's drafts are all accepted; elsewhere the MTP head drafts and
    its wrong drafts (flagged tokens) are rejected."""
    extra = textwrap.indent(
        "speculative: {type: [draft-mtp, ngram-mod], n_max: 3, ngram_mod: {n_match: 4, n_min: 1, n_max: 8}}\n",
        "    ",
    )
    config = write_models_yaml(tmp_path / "models.yaml", demo_model, extra=extra)
    copy, fresh = _copy_prompts()
    with RunningUp(config, tmp_path / "state") as up:
        argv = psutil.Process(up.instance_pids()[0]).cmdline()
        assert argv[argv.index("--spec-type") + 1] == BOTH
        endpoint = str(up.run["endpoint"])
        timings = {}
        # fresh first: ngram-mod's table outlives a request, so after the copy it would know the passage
        for name, prompt in (("fresh", fresh), ("copy", copy)):
            body = {"model": "demo", "prompt": prompt, "max_tokens": 16, "temperature": 0}
            resp = httpx.post(f"{endpoint}/v1/completions", json=body, timeout=120, trust_env=False)
            assert resp.status_code == 200, resp.text
            timings[name] = resp.json()["timings"]
        assert timings["copy"]["draft_n"] > 0 and timings["copy"]["draft_n_accepted"] == timings["copy"]["draft_n"]
        assert 0 < timings["fresh"]["draft_n_accepted"] < timings["fresh"]["draft_n"]
