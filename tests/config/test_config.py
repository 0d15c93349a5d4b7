"""models.yaml: located errors, the speculative rules, the schema and the example."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.config.load import load_config
from orchestrator.config.model_paths import resolve_file
from orchestrator.config.problems import ConfigError
from orchestrator.config.schema import SCHEMA_COMMENT, SCHEMA_FILE, Config, ModelConfig, schema_text
from orchestrator.launch.files import resolve_model_path

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "models.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def problems(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value


def test_n_min_above_n_max_names_file_line_model_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        models:
          - name: demo
            path: builtin:tiny-mtp
            speculative:
              type: draft-mtp
              n_max: 2
              n_min: 3
        """,
    )
    err = problems(path)
    assert len(err.problems) == 1
    assert str(err) == f"{path}:7: models[0].speculative.n_min: must be <= n_max (2)"
    assert err.hint and "n_min" in err.hint


def test_draft_lengths_with_type_none_are_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        models:
          - name: demo
            path: builtin:tiny-mtp
            speculative:
              type: none
              n_max: 4
              p_min: 0.5
        """,
    )
    err = problems(path)
    lines = [str(p) for p in err.problems]
    assert lines == [
        f"{path}:6: models[0].speculative.n_max: is set but speculative.type is none; "
        "remove n_max or set type: draft-mtp"
    ]


def test_type_none_alone_and_defaults_are_fine(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        models:
          - {name: a, path: a.gguf, speculative: {type: none}}
          - {name: b, path: b.gguf}
        """,
    )
    config = load_config(path)
    assert config.models[0].speculative.type == "none"
    assert config.models[1].speculative.type is None  # auto: decided from the GGUF
    assert (config.models[1].speculative.n_max, config.models[1].speculative.n_min) == (3, 1)


@pytest.mark.parametrize("spelling", ["mtp", "draft-mtp", "MTP"])
def test_fork_spelling_mtp_is_an_alias_of_draft_mtp(tmp_path: Path, spelling: str) -> None:
    path = write(tmp_path, f"models:\n  - {{name: q, path: q.gguf, speculative: {{type: {spelling}}}}}\n")
    assert load_config(path).models[0].speculative.type == "draft-mtp"


def test_unknown_keys_get_did_you_mean_and_the_allowed_list(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        server:
          prot: 9000
        models:
          - name: demo
            path: builtin:tiny-mtp
            ctx: 4096
            when_loading: reject
        """,
    )
    err = problems(path)
    by_key = {p.key: p for p in err.problems}
    assert set(by_key) == {"server.prot", "models[0].ctx", "models[0].when_loading"}
    assert by_key["server.prot"].line == 2
    assert "did you mean `port`?" in (by_key["server.prot"].hint or "")
    assert by_key["models[0].ctx"].line == 6
    assert "ctx_size" in (by_key["models[0].ctx"].hint or "")
    assert "belongs under server" in (by_key["models[0].when_loading"].hint or "")
    text = str(err)
    assert text.startswith(f"3 problems in {path}:")
    assert f"{path}:7: models[0].when_loading: unknown key `when_loading`" in text


def test_several_errors_are_several_located_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        server:
          when_loading: wait
        models:
          - name: demo
            path: builtin:tiny-mtp
            gpus: [0, x]
            replicas: many
          - name: other
            path: builtin:tiny-mpt
            port: 70000
        """,
    )
    err = problems(path)
    lines = {p.key: (p.line, p.message) for p in err.problems}
    assert lines["server.when_loading"][0] == 2
    assert "'hold'" in lines["server.when_loading"][1] and "(got 'wait')" in lines["server.when_loading"][1]
    assert lines["models[0].gpus[1]"][0] == 6 and "integer" in lines["models[0].gpus[1]"][1]
    assert lines["models[0].replicas"][0] == 7
    assert lines["models[1].path"][0] == 9 and "did you mean 'builtin:tiny-mtp'" in lines["models[1].path"][1]
    assert lines["models[1].port"][0] == 10 and "65535" in lines["models[1].port"][1]
    assert len(str(err).splitlines()) > len(err.problems)  # hints under the lines


def test_plan_flags_in_extra_args_are_refused_with_the_key_to_use(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        models:
          - name: demo
            path: builtin:tiny-mtp
            extra_args:
              - -fa
              - "on"
              - --spec_draft_n_max=4
        """,
    )
    err = problems(path)
    assert str(err) == (
        f"{path}:7: models[0].extra_args[2]: --spec-draft-n-max is set by the launch plan; "
        "use the models.yaml key speculative.n_max instead"
    )


def test_multimodal_needs_a_projector_and_a_projector_means_multimodal(tmp_path: Path) -> None:
    """``multimodal: true`` alone (with ``--mmproj`` in extra_args, as before ``mmproj`` was a key)
    names the key to set; ``mmproj`` makes the model multimodal, MTP drafting on or off."""
    path = write(
        tmp_path,
        """
        models:
          - name: eyes
            path: builtin:tiny-mtp
            multimodal: true
            extra_args: [--mmproj, mmproj.gguf]
        """,
    )
    assert "models[0].extra_args[0]: --mmproj is set by the launch plan; use the models.yaml key mmproj" in str(
        problems(path)
    )
    path.write_text("models:\n  - name: eyes\n    path: builtin:tiny-mtp\n    multimodal: true\n")
    assert "models[0].multimodal: is true but no projector is set; set mmproj" in str(problems(path))
    model = ModelConfig(name="eyes", path="builtin:tiny-mtp", mmproj="mmproj.gguf", speculative={"type": "draft-mtp"})
    assert model.multimodal and model.speculative.type == "draft-mtp"


@pytest.mark.parametrize(
    ("flag", "key"),
    [
        ("--port", "port"),
        ("--host", "server.host"),
        ("-m", "path"),
        ("--spec-type", "speculative.type"),
        ("-md", "speculative.draft"),
    ],
)
def test_each_plan_flag_names_its_key(flag: str, key: str) -> None:
    with pytest.raises(ValueError, match=f"use the models.yaml key {key}"):
        ModelConfig(name="m", path="m.gguf", extra_args=[flag, "x"])


@pytest.mark.parametrize("flag", ["--metrics", "-lv", "--sse-ping-interval"])
def test_a_plan_flag_no_key_controls_says_why(flag: str) -> None:
    """``--metrics`` and the like have no models.yaml key: the error says why the plan sets them."""
    with pytest.raises(ValueError, match=f"{flag} is set by the launch plan, and no models.yaml key changes it: ") as e:
        ModelConfig(name="m", path="m.gguf", extra_args=[flag, "4"])
    assert "use the models.yaml key" not in str(e.value)


def test_a_fit_of_its_own_is_a_models_choice() -> None:
    """``--fit`` is the plan's default (off where it could change nothing), not its own: a model may set it."""
    assert ModelConfig(name="m", path="m.gguf", extra_args=["--fit", "on", "-fitt", "2048"]).extra_args[1] == "on"


def test_plan_env_in_env_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        models:
          - name: demo
            path: builtin:tiny-mtp
            env:
              GGML_SCHED_MAX_COPIES: "1"
              CUDA_VISIBLE_DEVICES: "1"
        """,
    )
    err = problems(path)
    assert str(err) == (
        f"{path}:6: models[0].env.CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES is set by the launch plan; "
        "use the models.yaml key gpus instead"
    )


def test_default_model_names_a_model(tmp_path: Path) -> None:
    text = """
        server:
          default_model: {name}
        models:
          - name: demo
            path: builtin:tiny-mtp
            aliases: [tiny]
          - name: other
            path: builtin:tiny-mtp
        """
    path = write(tmp_path, text.format(name="nope"))
    assert str(problems(path)).startswith(f"{path}:2: server.default_model: 'nope' is not a model; names: demo, tiny")
    for name in ("other", "tiny"):  # a name or an alias
        assert load_config(write(tmp_path, text.format(name=name))).server.default_model == name


def test_names_and_aliases_are_unique(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        models:
          - name: demo
            path: builtin:tiny-mtp
            aliases: [tiny]
          - name: other
            path: other.gguf
            aliases: [big, tiny]
        """,
    )
    err = problems(path)
    assert str(err).startswith(f"{path}:7: models[1].aliases[1]: 'tiny' is already used by models[0].aliases[0]")


def test_missing_required_keys_point_at_the_entry(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        server:
          port: 8080
        models:
          - name: demo
        """,
    )
    err = problems(path)
    assert str(err).startswith(f"{path}:4: models[0].path: required key missing")


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("", "is empty"),
        ("# only a comment\n", "is empty"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("models: []\n", "models: is empty; list at least one model, or folders of GGUFs in models_dirs"),
        ("server: {port: 1}\n", "models: is empty; list at least one model, or folders of GGUFs in models_dirs"),
        ("path: /tmp/x\nmodels: [{name: a, path: a.gguf}]\n", "unknown key `path`"),
    ],
)
def test_file_level_problems(tmp_path: Path, text: str, expect: str) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(text)
    err = problems(path)
    assert str(path) in str(err)
    assert expect in str(err)
    assert err.hint


def test_yaml_syntax_error_has_its_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        models:
          - name: demo
            path: "builtin:tiny-mtp
            ctx_size: 2048
        """,
    )
    err = problems(path)
    assert str(err).startswith(f"{path}:")
    assert "YAML syntax error" in str(err)
    assert err.problems[0].line in (3, 4, 5)


def test_an_unclosed_bracket_names_the_line_it_started_on(tmp_path: Path) -> None:
    path = write(tmp_path, "models:\n  - name: demo\n    aliases: [tiny\n    ctx_size: 2048\n")
    err = problems(path)
    assert err.problems[0].line == 4  # where the parser noticed
    assert "(started on line 3)" in str(err) and "on line 3" in (err.hint or ""), (str(err), err.hint)


def test_duplicate_yaml_key_is_located(tmp_path: Path) -> None:
    path = write(tmp_path, "models:\n  - name: a\n    path: a.gguf\n    path: b.gguf\n")
    err = problems(path)
    assert err.problems[0].line == 4
    assert "YAML syntax error" in str(err)


def test_missing_file(tmp_path: Path) -> None:
    err = problems(tmp_path / "nope.yaml")
    assert "nope.yaml: no such file" in str(err)
    assert "--config" in (err.hint or "")


def test_config_where_locates_keys_after_loading(tmp_path: Path) -> None:
    path = write(tmp_path, "models:\n  - name: a\n    path: a.gguf\n    port: 9000\n")
    config = load_config(path)
    assert config.path == path
    assert config.where("models", 0, "port") == f"{path}:4: models[0].port"
    # a key that is not in the file falls back to its nearest ancestor's line
    assert config.where("models", 0, "speculative", "n_max") == f"{path}:2: models[0].speculative.n_max"
    assert Config(models=[ModelConfig(name="a", path="a.gguf")]).where("models", 0, "path") == "models[0].path"


def test_paths_resolve_against_the_yaml_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    model = ModelConfig(name="a", path="weights/a.gguf")
    assert resolve_model_path(model, tmp_path) == tmp_path / "weights" / "a.gguf"
    assert resolve_file("~/m/a.gguf", tmp_path) == tmp_path / "home" / "m" / "a.gguf"
    assert resolve_file("/abs/a.gguf", tmp_path) == Path("/abs/a.gguf")


def test_split_models_resolve_to_part_one(tmp_path: Path) -> None:
    assert resolve_file("big-00003-of-00004.gguf", tmp_path) == tmp_path / "big-00001-of-00004.gguf"
    (tmp_path / "q-00001-of-00002.gguf").write_bytes(b"GGUF")
    (tmp_path / "q-00002-of-00002.gguf").write_bytes(b"GGUF")
    assert resolve_file("q.gguf", tmp_path) == tmp_path / "q-00001-of-00002.gguf"


def test_builtin_demo_model_resolves_through_tiny_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from orchestrator.models import tiny

    fake = tmp_path / "demo.gguf"
    monkeypatch.setattr(tiny, "demo_model", lambda: fake)
    assert resolve_model_path(ModelConfig(name="demo", path="builtin:tiny-mtp"), tmp_path) == fake


def test_schema_file_is_current() -> None:
    committed = SCHEMA_FILE.read_text()
    assert committed == schema_text(), "run `python -m orchestrator.config.schema` to regenerate the schema"


def test_repo_models_yaml_loads_and_serves_the_demo() -> None:
    path = REPO / "models.yaml"
    assert path.read_text().splitlines()[0] == SCHEMA_COMMENT
    config = load_config(path)
    demo = config.models[0]
    assert (demo.name, demo.path, demo.speculative.type) == ("demo", "builtin:tiny-mtp", "draft-mtp")
    assert (demo.speculative.n_max, demo.speculative.n_min) == (3, 1)
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8080)


def test_repo_models_yaml_commented_qwen_entry_is_valid(tmp_path: Path) -> None:
    """The commented Qwen3.6 entry must stay valid: uncomment it and load."""
    lines = (REPO / "models.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("# - name: qwen3.6"))
    out = lines[:start]
    for line in lines[start:]:
        assert line.startswith("  #"), line
        out.append("  " + line[len("  # ") :] if line.startswith("  # ") else "")
    path = tmp_path / "models.yaml"
    path.write_text("\n".join(out) + "\n")
    config = load_config(path)
    qwen = config.model("qwen3.6")
    assert qwen.gpus == [0] and qwen.ctx_size == 65536 and qwen.parallel == 1
    assert qwen.speculative.type == "draft-mtp" and qwen.speculative.n_max == 3
    assert qwen.extra_args == ["-fa", "on"]
    assert qwen.thinking is True


def test_schema_accepts_the_fork_spelling_and_forbids_extra_keys() -> None:
    import json

    schema = json.loads(SCHEMA_FILE.read_text())
    spec = schema["$defs"]["SpeculativeConfig"]
    assert "mtp" in json.dumps(spec["properties"]["type"])
    for name in ("Config", "ModelConfig", "SpeculativeConfig", "ServerConfig", "Timeouts", "BuildConfig"):
        node = schema if name == "Config" else schema["$defs"][name]
        assert node["additionalProperties"] is False, name
    assert "path" not in schema["properties"]  # set by the loader, not by the file


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("models:\n  - name: a\n    path: a.gguf\n    ctx_size: true\n", 4, "models[0].ctx_size"),
        ("models:\n  - name: a\n    path: a.gguf\n    gpu_layers: false\n", 4, "models[0].gpu_layers"),
        ("server:\n  timeouts:\n    queue: true\nmodels: [{name: a, path: a.gguf}]\n", 3, "server.timeouts.queue"),
    ],
)
def test_a_boolean_in_a_number_field_is_refused(tmp_path: Path, text: str, line: int, key: str) -> None:
    # pydantic's lax mode would read `ctx_size: true` as -c 1
    path = tmp_path / "models.yaml"
    path.write_text(text)
    assert str(problems(path)).startswith(f"{path}:{line}: {key}: should be a number, not a boolean")


def test_booleans_still_load_where_booleans_belong(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        server: {auth_health: true}
        models:
          - {name: a, path: a.gguf, thinking: false, multimodal: false, speculative: {type: none}}
        """,
    )
    config = load_config(path)
    assert config.server.auth_health is True and config.models[0].thinking is False


def test_top_level_list_names_the_yaml_kind_and_duplicate_name_hint_says_rename(tmp_path: Path) -> None:
    path = write(tmp_path, "- a\n- b\n")
    err = problems(path)
    assert "not a list" in str(err) and "Commented" not in str(err)
    path = write(tmp_path, "models:\n  - {name: a, path: a.gguf}\n  - {name: a, path: b.gguf}\n")
    err = problems(path)
    assert "'a' is already used by models[0].name" in str(err)
    assert err.hint is not None and "rename" in err.hint


def test_deeply_nested_yaml_is_a_located_error_not_a_recursion_traceback(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("{models: " + "[" * 5000 + "]" * 5000 + "}\n")
    err = problems(path)
    assert str(err) == f"{path}: YAML nested too deeply to read"
    assert err.hint


@pytest.mark.parametrize(
    ("value_line", "key", "fix"),
    [
        ("    ctx_size: 64k\n", "models[0].ctx_size", "whole number"),
        ("    parallel: 1.5\n", "models[0].parallel", "whole number"),
        ("    thinking: nope\n", "models[0].thinking", "true or false"),
        ("    aliases: tiny\n", "models[0].aliases", "a list"),
        ("    speculative: {type: draft-mpt}\n", "models[0].speculative", "draft-mtp"),
    ],
)
def test_a_value_of_the_wrong_type_says_what_to_write(tmp_path: Path, value_line: str, key: str, fix: str) -> None:
    # what a person gets at the terminal: the file, line and key, what is wrong, and what to write instead
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: a\n    path: a.gguf\n" + value_line)
    err = problems(path)
    [problem] = err.problems
    assert str(problem).startswith(f"{path}:4: {key}") and fix in (problem.hint or ""), (str(problem), problem.hint)


def test_an_unknown_drafter_is_named_once_at_its_key_with_the_nearest_spelling(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: a\n    path: a.gguf\n    speculative:\n      type: draft-mpt\n")
    text = str(problems(path))
    assert text == f"{path}:5: models[0].speculative.type: unknown drafter 'draft-mpt' (did you mean 'draft-mtp'?)"
