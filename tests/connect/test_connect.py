"""``orchestrator connect``: each client's settings for the endpoint, the key hidden unless asked,
and ``--write`` editing the client's own file (a backup first, the rest of the file kept)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from orchestrator.config.load import load_config
from orchestrator.connect.base import HIDDEN
from orchestrator.connect.clients import CLIENTS, client_config, write
from orchestrator.connect.endpoint import endpoint_of
from orchestrator.errors import UserError

SECRET = "sk-local-secret-123"


def _config(tmp_path: Path, keys: bool = True) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(
        "server:\n  host: 0.0.0.0\n  port: 8123\n" + (f"  api_keys: [{SECRET}]\n" if keys else "") + "models:\n"
        "  - {name: coder, path: builtin:tiny-mtp, aliases: [c, code], ctx_size: 65536, parallel: 2}\n"
        "  - {name: chat, path: builtin:tiny-mtp, ctx_size: 8192}\n"
    )
    return path


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_CONFIG_HOME", "QWEN_HOME", "CONTINUE_GLOBAL_DIR"):
        monkeypatch.delenv(var, raising=False)
    return home


def test_the_endpoint_as_clients_see_it(tmp_path: Path) -> None:
    ep = endpoint_of(load_config(_config(tmp_path)))
    assert ep.url == "http://127.0.0.1:8123" and ep.key == SECRET  # a wildcard bind is dialled on loopback
    assert [(m.name, m.aliases, m.context) for m in ep.models] == [("coder", ("c", "code"), 32768), ("chat", (), 8192)]
    assert endpoint_of(load_config(_config(tmp_path)), {"endpoint": "http://127.0.0.1:40000"}).url.endswith(":40000")
    assert ep.model("code").name == "coder"
    with pytest.raises(UserError, match="no model 'gpt-4'"):
        ep.model("gpt-4")


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_every_client_gets_address_models_and_window_and_no_secret(tmp_path: Path, home: Path, client: str) -> None:
    ep = endpoint_of(load_config(_config(tmp_path)))
    text = "\n".join(client_config(client, ep).lines)
    assert "127.0.0.1:8123" in text and "coder" in text and "c, code" in text and "32768" in text
    assert SECRET not in text and HIDDEN in text
    assert HIDDEN.replace("-", "").isalnum()  # one shell word: a pasted export line is not a syntax error
    assert SECRET in "\n".join(client_config(client, ep, show_key=True).lines)


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("show_key", [False, True])
def test_printed_shell_lines_paste_into_a_shell(tmp_path: Path, home: Path, client: str, show_key: bool) -> None:
    # every `export` line a client prints runs in bash as pasted and sets what it says
    path = tmp_path / "models.yaml"
    path.write_text(
        'server:\n  port: 8123\n  api_keys: ["it\'s a $key; with spaces"]\nmodels:\n'
        "  - {name: coder, path: builtin:tiny-mtp, ctx_size: 65536}\n"
    )
    lines = client_config(client, endpoint_of(load_config(path)), show_key=show_key).lines
    exports = [line.strip() for line in lines if line.strip().startswith("export ")]
    if client in ("continue", "opencode", "kilo", "qwen-code"):  # a file only: nothing to paste into a shell
        assert not exports
        return
    assert exports
    script = "\n".join([*exports, *(f'printf "%s\\n" "${e.split()[1].split("=")[0]}"' for e in exports)])
    done = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    got = done.stdout.splitlines()
    assert ("it's a $key; with spaces" in got) == show_key and (HIDDEN in got) != show_key
    assert client == "codex" or any(v.startswith("http://127.0.0.1:8123") for v in got)  # Codex: only its key


def test_claude_code_write_merges_env_after_a_backup(tmp_path: Path, home: Path) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"theme": "dark", "env": {"KEEP": "1", "ANTHROPIC_MODEL": "old"}}))
    [(path, saved)] = write(client_config("claude-code", endpoint_of(load_config(_config(tmp_path))), "chat"))
    assert path == settings and saved is not None
    assert json.loads(saved.read_text())["env"]["ANTHROPIC_MODEL"] == "old"
    data = json.loads(settings.read_text())
    assert data["theme"] == "dark" and data["env"]["KEEP"] == "1"
    env = data["env"]
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8123" and env["ANTHROPIC_AUTH_TOKEN"] == SECRET
    assert {env[f"ANTHROPIC_DEFAULT_{t}_MODEL"] for t in ("OPUS", "SONNET", "HAIKU")} == {"chat"}
    # told the real window: it would assume 1M for a name it does not know and compact too late
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "8192"
    # 2.1.3xx reads an auto-compact window under 100K as 100K and warns on every start: not set
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in env
    # B69: what the endpoint serves, in its own capability names, not its guess for a name it does
    # not know; and a stream idle limit above its 300 s default for a long first prefill
    caps = set(env["CLAUDE_CODE_MODEL_CAPABILITIES"].split(","))
    assert {"mid_conv_system", "mid_conv_tool_change", "adaptive_thinking", "-effort", "-context_management"} <= caps
    assert int(env["CLAUDE_STREAM_IDLE_TIMEOUT_MS"]) > 300_000


def test_claude_code_gets_its_auto_compact_window_from_100k(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - {name: big, path: builtin:tiny-mtp, ctx_size: 262144, parallel: 2}\n")
    write(client_config("claude-code", endpoint_of(load_config(path))))
    env = json.loads((home / ".claude" / "settings.json").read_text())["env"]
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "131072"


def test_codex_write_keeps_the_rest_of_config_toml(tmp_path: Path, home: Path) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('# mine\nmodel = "gpt-5"\n\n[tui]\nnotifications = true # keep me\n')
    write(client_config("codex", endpoint_of(load_config(_config(tmp_path)))))
    text = config.read_text()
    assert "# mine" in text and "# keep me" in text
    data = tomllib.loads(text)
    assert (data["model"], data["model_provider"], data["model_context_window"]) == ("coder", "orchestrator", 32768)
    # compacts before the window is full, with room for the longest answer (8192) and a 5% margin
    assert data["model_auto_compact_token_limit"] == 32768 - 8192 - 1638
    assert "model_max_output_tokens" not in data  # Codex 0.171 ignores it, warning on every run
    provider = data["model_providers"]["orchestrator"]
    assert provider["base_url"] == "http://127.0.0.1:8123/v1" and provider["wire_api"] == "responses"
    assert provider["supports_websockets"] is False  # B73: Codex tries no WebSocket first
    assert provider["env_key"] == "ORCHESTRATOR_API_KEY" and SECRET not in text  # Codex reads keys from env
    assert data["tui"] == {"notifications": True}


def test_opencode_and_continue_writes(tmp_path: Path, home: Path) -> None:
    ep = endpoint_of(load_config(_config(tmp_path, keys=False)))
    write(client_config("opencode", ep))
    oc = json.loads((home / ".config" / "opencode" / "opencode.json").read_text())
    provider = oc["provider"]["orchestrator"]
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8123/v1", "apiKey": "none"}
    assert provider["models"]["coder"]["limit"] == {"context": 32768, "output": 8192}
    assert provider["models"]["chat"]["limit"] == {"context": 8192, "output": 2048}
    assert oc["model"] == oc["small_model"] == "orchestrator/coder"
    cont = home / ".continue" / "config.yaml"
    cont.parent.mkdir()
    cont.write_text("name: mine\nversion: 0.0.1\nschema: v1\nmodels:\n  - {name: other, provider: ollama, model: x}\n")
    write(client_config("continue", ep, "chat"))
    write(client_config("continue", ep, "chat"))  # again: replaced, not added twice
    data = YAML(typ="safe").load(cont.read_text())
    assert data["name"] == "mine" and [m["name"] for m in data["models"]] == ["other", "chat (orchestrator)"]
    assert data["models"][1]["apiBase"] == "http://127.0.0.1:8123/v1"
    assert data["models"][1]["defaultCompletionOptions"]["contextLength"] == 8192
    # what it prints pastes into that file as the same entry
    printed = [line[2:] for line in client_config("continue", ep, "chat").lines[1:] if line.startswith("  ")]
    pasted = YAML(typ="safe").load("\n".join(printed))
    assert pasted["models"] == [data["models"][1]]


def test_a_broken_file_is_left_alone_and_openwebui_has_none(tmp_path: Path, home: Path) -> None:
    ep = endpoint_of(load_config(_config(tmp_path)))
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{not json")
    with pytest.raises(UserError, match="not valid"):
        write(client_config("claude-code", ep))
    assert settings.read_text() == "{not json"
    with pytest.raises(UserError, match="own database"):
        write(client_config("openwebui", ep))


def test_the_cli_prints_and_refuses_an_unknown_client(tmp_path: Path, home: Path) -> None:
    config = _config(tmp_path)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "ORCHESTRATOR_STATE": str(tmp_path / "state")}
    cli = [sys.executable, "-m", "orchestrator.cli.app", "connect"]
    done = subprocess.run([*cli, "codex", "-c", str(config)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "wire_api" in done.stdout and SECRET not in done.stdout
    done = subprocess.run([*cli, "cursor", "-c", str(config)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown client 'cursor'" in done.stderr and "claude-code" in done.stderr


def _running_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: str) -> Path:
    """A running ``up``'s state (this test process stands in for it) serving ``_config``'s file at
    ``endpoint``; that models.yaml."""
    from orchestrator.host import statefile

    config = _config(tmp_path)
    monkeypatch.setenv("ORCHESTRATOR_STATE", str(tmp_path / "state"))
    me = os.getpid()
    started = statefile.process_start_time(me)
    statefile.write({"pid": me, "pid_started": started, "endpoint": endpoint, "config": str(config)})
    return config


def test_outside_the_folder_of_a_running_up_its_models_yaml_is_used(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `orchestrator connect codex` from another folder while `up` runs: not "models.yaml: no such file"
    from orchestrator.cli import connect

    _running_up(tmp_path, monkeypatch, "http://127.0.0.1:8123")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert connect.run("codex", Path("models.yaml"), model=None, write=False, show_key=False) == 0
    assert 'base_url = "http://127.0.0.1:8123/v1"' in capsys.readouterr().out


def test_without_c_the_running_ups_models_yaml_wins_over_the_one_here(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `up -c other.yaml` runs (its port picked by the OS); `connect` in a folder with its own
    # models.yaml must point the agent at what serves, not at that file's port
    from orchestrator.cli import connect

    config = _running_up(tmp_path, monkeypatch, "http://127.0.0.1:33865")
    here = tmp_path / "here"
    here.mkdir()
    (here / "models.yaml").write_text(config.read_text().replace("port:", "port: 8080 #"))
    monkeypatch.chdir(here)
    assert connect.run("codex", None, model=None, write=False, show_key=False) == 0
    assert 'base_url = "http://127.0.0.1:33865/v1"' in capsys.readouterr().out
    assert connect.run("codex", Path("models.yaml"), model=None, write=False, show_key=False) == 0  # -c: as told
    assert "33865" not in capsys.readouterr().out


def test_qwen_code_write_keeps_other_providers_and_settings(tmp_path: Path, home: Path) -> None:
    settings = home / ".qwen" / "settings.json"
    settings.parent.mkdir()
    theirs = {"id": "qwen3-coder-plus", "baseUrl": "https://dashscope.example/v1", "envKey": "DASHSCOPE_API_KEY"}
    old_ours = {"id": "coder", "baseUrl": "http://127.0.0.1:1/v1"}
    settings.write_text(json.dumps({"general": {"vimMode": True}, "modelProviders": {"openai": [theirs, old_ours]}}))
    ep = endpoint_of(load_config(_config(tmp_path)))
    write(client_config("qwen-code", ep))
    write(client_config("qwen-code", ep))  # again: the same entries, not added twice
    data = json.loads(settings.read_text())
    assert data["general"] == {"vimMode": True}
    entries = data["modelProviders"]["openai"]
    assert [e["id"] for e in entries] == ["qwen3-coder-plus", "coder", "chat"] and entries[0] == theirs
    coder = entries[1]
    assert coder["baseUrl"] == "http://127.0.0.1:8123/v1" and coder["envKey"] == "ORCHESTRATOR_API_KEY"
    assert coder["generationConfig"] == {"contextWindowSize": 32768, "samplingParams": {"max_tokens": 8192}}
    assert data["env"]["ORCHESTRATOR_API_KEY"] == SECRET  # the variable envKey names, set by the file
    assert data["security"]["auth"]["selectedType"] == "openai" and data["model"]["name"] == "coder"


def test_kilo_writes_its_own_file(tmp_path: Path, home: Path) -> None:
    ep = endpoint_of(load_config(_config(tmp_path)))
    [(path, saved)] = write(client_config("kilo", ep, "chat"))
    assert path == home / ".config" / "kilo" / "kilo.json" and saved is None
    assert not (home / ".config" / "opencode").exists()  # not opencode's
    data = json.loads(path.read_text())
    assert data["$schema"] == "https://app.kilo.ai/config.json" and data["model"] == "orchestrator/chat"
    provider = data["provider"]["orchestrator"]
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8123/v1", "apiKey": SECRET}
    assert provider["models"]["chat"]["limit"] == {"context": 8192, "output": 2048}


def test_aider_writes_its_three_files_keeping_the_rest(tmp_path: Path, home: Path) -> None:
    (home / ".aider.conf.yml").write_text("# mine\ndark-mode: true\nmodel: gpt-4o\n")
    (home / ".aider.model.settings.yml").write_text("- name: openai/other\n  edit_format: diff\n")
    (home / ".aider.model.metadata.json").write_text(json.dumps({"openai/other": {"max_input_tokens": 1}}))
    ep = endpoint_of(load_config(_config(tmp_path)))
    written = write(client_config("aider", ep, max_output=1000))
    assert [p.name for p, _ in written] == [
        ".aider.conf.yml",
        ".aider.model.metadata.json",
        ".aider.model.settings.yml",
    ]
    assert all(saved is not None for _, saved in written)
    conf = YAML(typ="safe").load((home / ".aider.conf.yml").read_text())
    assert conf == {"dark-mode": True, "model": "openai/coder", "openai-api-base": "http://127.0.0.1:8123/v1",
                    "openai-api-key": SECRET}  # fmt: skip
    assert "# mine" in (home / ".aider.conf.yml").read_text()
    meta = json.loads((home / ".aider.model.metadata.json").read_text())
    assert meta["openai/other"] == {"max_input_tokens": 1}
    assert meta["openai/coder"]["max_input_tokens"] == 32768 and meta["openai/coder"]["max_output_tokens"] == 1000
    assert meta["openai/chat"]["litellm_provider"] == "openai" and meta["openai/chat"]["mode"] == "chat"
    write(client_config("aider", ep))  # again: replaced, not added twice
    items = YAML(typ="safe").load((home / ".aider.model.settings.yml").read_text())
    assert [i["name"] for i in items] == ["openai/other", "openai/coder", "openai/chat"]
    assert items[1]["extra_params"] == {"max_tokens": 8192}
