"""The launch plan: argv and speculative flags, GPUs and replicas, ports, fork GGUFs, the fit
check; the capability probe of the built llama-server. Planning is pure: it takes the server's
capabilities as a value, so only the probe and the serving test need the native build."""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from orchestrator.cli.up import render_plan
from orchestrator.config.load import load_config
from orchestrator.config.plan_flags import PLAN_FLAGS
from orchestrator.config.schema import Config, ModelConfig, ServerConfig, SpeculativeConfig
from orchestrator.errors import UserError
from orchestrator.host.gpus import GPU
from orchestrator.host.ports import check_port_free
from orchestrator.host.process import die_with_parent
from orchestrator.launch.plan import plan_launch, plan_lines
from orchestrator.launch.spec import with_draft_length, without_speculation
from orchestrator.models.tiny_mmproj import write_tiny_mmproj
from orchestrator.native import build as build_mod
from orchestrator.native.capabilities import ServerCapabilities, probe_capabilities

GIB = 2**30
SPEC_FLAGS = ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "--spec-draft-n-min", "1"]


def write_gguf(path: Path, *, arch: str = "qwen35moe", nextn: int = 0, trunk: bool = True) -> Path:
    """A header-level GGUF (real format, few small tensors): enough for the plan, which only
    reads headers. ``nextn`` > 0 adds an MTP head block; ``trunk=False`` makes a NextN-only draft."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    blocks = 1 + nextn
    writer.add_block_count(blocks)
    writer.add_context_length(4096)
    if nextn:
        writer.add_uint32(f"{arch}.nextn_predict_layers", nextn)
    if trunk:
        writer.add_tensor("blk.0.attn_norm.weight", np.ones(8, dtype=np.float32))
    for b in range(1, blocks):
        writer.add_tensor(f"blk.{b}.nextn.eh_proj.weight", np.ones((8, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def real_build() -> build_mod.BuildInfo:
    """The native build (`orchestrator build`, or $ORCHESTRATOR_BIN_DIR): for tests that run it."""
    return build_mod.locate()


@pytest.fixture
def native(tmp_path: Path) -> build_mod.BuildInfo:
    """A build the plan only names (planning runs no binary): a CPU llama-server path."""
    bin_dir = tmp_path / "bin"
    return build_mod.BuildInfo(bin_dir, bin_dir / "llama-server", bin_dir, {"backend": "cpu"})


@pytest.fixture
def cuda_build(native: build_mod.BuildInfo) -> build_mod.BuildInfo:
    """The same build, planned as if it were a CUDA build."""
    return dataclasses.replace(native, manifest={**native.manifest, "backend": "cuda"})


def caps(build: build_mod.BuildInfo, *, draft_mtp: bool = True) -> ServerCapabilities:
    """The capabilities a probe of ``build`` would report (backend from its manifest)."""
    return ServerCapabilities(backend=build.manifest.get("backend", "cpu"), draft_mtp=draft_mtp, flags=frozenset())


def gpu(index: int, free_gib: float = 30, total_gib: float = 32) -> GPU:
    return GPU(index, "NVIDIA GeForce RTX 5090", f"GPU-{index:04d}", int(total_gib * GIB), int(free_gib * GIB), "12.0")


def config_for(tmp_path: Path, *models: ModelConfig, server_port: int = 0) -> Config:
    config = Config(server=ServerConfig(port=server_port), models=list(models))
    config.path = tmp_path / "models.yaml"
    return config


def after(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_mtp_model_gets_all_speculative_flags_together(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    model = write_gguf(tmp_path / "mtp.gguf", nextn=1)
    config = config_for(tmp_path, ModelConfig(name="demo", path="mtp.gguf", threads=2))
    [spec] = plan_launch(config, gpus=[], build=native, capabilities=caps(native))
    argv = spec.argv
    assert argv[0] == str(native.server)
    start = argv.index("--spec-type")
    assert list(argv[start : start + 6]) == SPEC_FLAGS
    assert "--spec-draft-p-min" not in argv and "-md" not in argv
    assert after(argv, "-m") == str(model)
    assert after(argv, "--alias") == "demo" and spec.alias == "demo"
    assert after(argv, "--host") == "127.0.0.1" and after(argv, "--port") == "0" and spec.port == 0
    assert (
        "--metrics" in argv and after(argv, "-c") == "4096" and after(argv, "-np") == "1" and after(argv, "-t") == "2"
    )
    assert "-ngl" not in argv  # CPU
    assert (spec.name, spec.spec_type, spec.n_max, spec.n_min, spec.gpus) == ("demo-0", "draft-mtp", 3, 1, ())
    # a CPU-only build leaves CUDA_VISIBLE_DEVICES alone
    assert "CUDA_VISIBLE_DEVICES" not in spec.env
    assert spec.env["LD_LIBRARY_PATH"].split(":")[0] == str(native.lib_dir)


def test_p_min_and_separate_draft_gguf(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "trunk.gguf")
    draft = write_gguf(tmp_path / "trunk.draft.gguf", nextn=1, trunk=False)
    config = config_for(
        tmp_path,
        ModelConfig(
            name="sep",
            path="trunk.gguf",
            speculative=SpeculativeConfig(n_max=4, n_min=2, p_min=0.75, draft="trunk.draft.gguf"),
        ),
    )
    [spec] = plan_launch(config, gpus=[], build=native, capabilities=caps(native))
    start = spec.argv.index("--spec-type")
    assert list(spec.argv[start : start + 10]) == [
        "--spec-type",
        "draft-mtp",
        "--spec-draft-n-max",
        "4",
        "--spec-draft-n-min",
        "2",
        "--spec-draft-p-min",
        "0.75",
        "-md",
        str(draft),
    ]
    assert spec.draft == draft and spec.spec_type == "draft-mtp"


def test_model_without_head_gets_no_speculative_flags(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "plain.gguf")
    config = config_for(tmp_path, ModelConfig(name="plain", path="plain.gguf"))
    [spec] = plan_launch(config, gpus=[], build=native, capabilities=caps(native))
    assert not any(a.startswith("--spec") for a in spec.argv) and "-md" not in spec.argv
    assert spec.spec_type is None and spec.n_max is None
    assert any("no NextN/MTP head" in n for n in spec.notes)


def test_type_none_turns_speculation_off_on_an_mtp_model(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "mtp.gguf", nextn=1)
    config = config_for(tmp_path, ModelConfig(name="m", path="mtp.gguf", speculative=SpeculativeConfig(type="none")))
    [spec] = plan_launch(config, gpus=[], build=native, capabilities=caps(native))
    assert not any(a.startswith("--spec") for a in spec.argv)


def test_draft_mtp_on_a_headless_gguf_names_file_model_and_key(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "plain.gguf")
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: plain\n    path: plain.gguf\n    speculative:\n      type: mtp\n")
    config = load_config(path)
    with pytest.raises(UserError) as info:
        plan_launch(config, gpus=[], build=native, capabilities=caps(native))
    text = str(info.value)
    assert text.startswith(f"{path}:5: models[0].speculative.type: model 'plain' asks for draft-mtp")
    assert str(tmp_path / "plain.gguf") in text and "no NextN/MTP head" in text
    assert "speculative.type: none" in (info.value.hint or "")


def test_fork_gguf_is_refused_before_launch(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "fork.gguf", arch="qwen35moe_mtp", nextn=1)
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: qwen\n    path: fork.gguf\n")
    with pytest.raises(UserError) as info:
        plan_launch(load_config(path), gpus=[], build=native, capabilities=caps(native))
    text = str(info.value)
    assert text.startswith(f"{path}:3: models[0].path: model 'qwen'")
    assert "'qwen35moe_mtp'" in text and "fork" in text and "'qwen35moe'" in text
    assert "upstream GGUF" in (info.value.hint or "")


def test_a_draft_only_file_as_the_model_is_refused(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "head.gguf", nextn=1, trunk=False)
    config = config_for(tmp_path, ModelConfig(name="h", path="head.gguf"))
    with pytest.raises(UserError, match="NextN-only draft"):
        plan_launch(config, gpus=[], build=native, capabilities=caps(native))


def test_a_projector_launches_with_mtp_and_counts_in_the_fit(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    """``mmproj``: ``--mmproj`` with the MTP flags (the pin drafts after images: the MTP head reads
    the target's embeddings at media positions), the model takes images, the fit check counts
    the projector's file."""
    write_gguf(tmp_path / "mtp.gguf", nextn=1)
    projector = write_tiny_mmproj(tmp_path / "mmproj-tiny.gguf")
    model = ModelConfig(name="eyes", path="mtp.gguf", mmproj="mmproj-tiny.gguf")
    assert model.multimodal
    [spec] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=caps(native))
    assert after(spec.argv, "--mmproj") == str(projector) and after(spec.argv, "--spec-type") == "draft-mtp"
    plain = ModelConfig(name="eyes", path="mtp.gguf")
    [without] = plan_launch(config_for(tmp_path, plain), gpus=[], build=native, capabilities=caps(native))
    assert "--mmproj" not in without.argv


def test_a_missing_projector_names_the_key(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "mtp.gguf", nextn=1)
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: eyes\n    path: mtp.gguf\n    mmproj: mmproj-gone.gguf\n")
    with pytest.raises(UserError) as info:
        plan_launch(load_config(path), gpus=[], build=native, capabilities=caps(native))
    assert str(info.value).startswith(f"{path}:4: models[0].mmproj: model 'eyes': no such projector GGUF")
    path.write_text("models:\n  - name: eyes\n    path: mtp.gguf\n    mmproj: mtp.gguf\n")  # a model, not a projector
    with pytest.raises(UserError) as info:
        plan_launch(load_config(path), gpus=[], build=native, capabilities=caps(native))
    assert str(info.value).startswith(f"{path}:4: models[0].mmproj: model 'eyes': mtp.gguf is not a projector GGUF")


def test_missing_gguf_names_the_key(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: gone\n    path: weights/gone.gguf\n")
    with pytest.raises(UserError) as info:
        plan_launch(load_config(path), gpus=[], build=native, capabilities=caps(native))
    assert str(info.value).startswith(
        f"{path}:3: models[0].path: model 'gone': no such GGUF file {tmp_path / 'weights/gone.gguf'}"
    )


def test_cpu_replicas_and_fixed_ports(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "m.gguf", nextn=1)
    with socket.socket() as probe:  # a port that is free right now, for the fixed-port plan
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
    if base > 65000:
        base -= 1000
    config = config_for(tmp_path, ModelConfig(name="m", path="m.gguf", replicas=2, port=base))
    try:
        specs = plan_launch(config, gpus=[], build=native, capabilities=caps(native))
    except UserError as err:  # something else grabbed the neighbour port meanwhile
        pytest.skip(str(err))
    assert [(s.name, s.replica, s.gpus, s.port) for s in specs] == [("m-0", 0, (), base), ("m-1", 1, (), base + 1)]
    assert [after(s.argv, "--port") for s in specs] == [str(base), str(base + 1)]


def test_auto_gpus_one_replica_per_gpu_round_robin(tmp_path: Path, cuda_build: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "m.gguf", nextn=1)
    config = config_for(
        tmp_path,
        ModelConfig(name="a", path="m.gguf", replicas=3),
        ModelConfig(name="b", path="m.gguf"),
    )
    specs = plan_launch(config, gpus=[gpu(0), gpu(1)], build=cuda_build, capabilities=caps(cuda_build))
    assert [(s.name, s.gpus) for s in specs] == [("a-0", (0,)), ("a-1", (1,)), ("a-2", (0,)), ("b-0", (1,))]
    for s in specs:
        assert s.env["CUDA_VISIBLE_DEVICES"] == str(s.gpus[0])
        assert s.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert after(s.argv, "-ngl") == "all"
        assert "--tensor-split" not in s.argv


def test_gpu_list_is_one_process_with_tensor_split(tmp_path: Path, cuda_build: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "m.gguf", nextn=1)
    config = config_for(tmp_path, ModelConfig(name="big", path="m.gguf", gpus=[0, 1], gpu_layers=99))
    [spec] = plan_launch(
        config, gpus=[gpu(0, total_gib=32), gpu(1, total_gib=24)], build=cuda_build, capabilities=caps(cuda_build)
    )
    assert spec.gpus == (0, 1)
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert after(spec.argv, "--tensor-split") == "32,24"
    assert after(spec.argv, "-ngl") == "99"


def test_cpu_instance_of_a_cuda_build_hides_the_gpus(tmp_path: Path, cuda_build: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "m.gguf")
    config = config_for(tmp_path, ModelConfig(name="m", path="m.gguf", replicas=2))
    specs = plan_launch(config, gpus=[], build=cuda_build, capabilities=caps(cuda_build))
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in specs] == ["", ""]
    assert all("-ngl" not in s.argv for s in specs)


def test_unknown_gpu_index_is_refused(tmp_path: Path, cuda_build: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "m.gguf")
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: m\n    path: m.gguf\n    gpus: [3]\n")
    with pytest.raises(UserError) as info:
        plan_launch(load_config(path), gpus=[gpu(0)], build=cuda_build, capabilities=caps(cuda_build))
    assert str(info.value).startswith(f"{path}:4: models[0].gpus: model 'm' asks for GPU 3")
    assert "GPUs here: 0" in str(info.value)


def test_fit_check_refuses_with_numbers_unless_forced(tmp_path: Path, cuda_build: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "m.gguf")
    config = config_for(tmp_path, ModelConfig(name="m", path="m.gguf", gpus=[0]))
    tight = [gpu(0, free_gib=0.25)]
    with pytest.raises(UserError) as info:
        plan_launch(config, gpus=tight, build=cuda_build, capabilities=caps(cuda_build))
    text = str(info.value)
    assert "does not fit" in text and "GPU 0" in text and "0.2 GiB is free" in text and "m-0" in text
    assert "--force" in (info.value.hint or "")
    [spec] = plan_launch(config, gpus=tight, build=cuda_build, capabilities=caps(cuda_build), force=True)
    assert any(n.startswith("forced: GPU 0") for n in spec.notes)


def test_cpu_only_build_runs_on_cpu_and_says_so(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "m.gguf")
    cpu_build = dataclasses.replace(native, manifest={**native.manifest, "backend": "cpu"})
    config = config_for(tmp_path, ModelConfig(name="m", path="m.gguf"))
    [spec] = plan_launch(config, gpus=[gpu(0)], build=cpu_build, capabilities=caps(cpu_build))
    assert spec.gpus == () and "-ngl" not in spec.argv
    assert any("cpu-only" in n for n in spec.notes)


def _plan_while_a_port_is_held(
    tmp_path: Path, native: build_mod.BuildInfo, yaml: str
) -> tuple[Path, int, pytest.ExceptionInfo[UserError]]:
    """Plan ``yaml`` (``{port}``: a port this process holds) into the UserError it must raise."""
    write_gguf(tmp_path / "m.gguf")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        path = tmp_path / "models.yaml"
        path.write_text(yaml.format(port=port))
        with pytest.raises(UserError) as info:
            plan_launch(load_config(path), gpus=[], build=native, capabilities=caps(native))
    return path, port, info


def test_port_conflict_names_the_port_and_the_holder(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    yaml = "server:\n  port: 0\nmodels:\n  - name: m\n    path: m.gguf\n    port: {port}\n"
    path, port, info = _plan_while_a_port_is_held(tmp_path, native, yaml)
    text = str(info.value)
    assert text.startswith(
        f"{path}:6: models[0].port (m-0): port {port} on 127.0.0.1 is already in use by pid {os.getpid()} ("
    )
    assert "leave the port out" in (info.value.hint or "")


def test_a_taken_server_port_says_to_set_server_port(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    # leaving server.port out means 8080, not an OS-picked port: the fix must say what to set
    yaml = "server:\n  port: {port}\nmodels:\n  - name: m\n    path: m.gguf\n"
    path, port, info = _plan_while_a_port_is_held(tmp_path, native, yaml)
    assert str(info.value).startswith(f"{path}:2: server.port: port {port} on 127.0.0.1 is already in use by pid ")
    assert "set server.port" in (info.value.hint or "") and "leave the port out" not in (info.value.hint or "")


def test_port_conflict_held_by_another_process(tmp_path: Path) -> None:
    code = (
        "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
        "print(s.getsockname()[1], flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        with pytest.raises(UserError) as info:
            check_port_free("127.0.0.1", port, where="models.yaml:3: server.port")
        text = str(info.value)
        assert text.startswith(
            f"models.yaml:3: server.port: port {port} on 127.0.0.1 is already in use by pid {child.pid} ("
        )
        assert "python" in text
    finally:
        child.kill()
        child.wait(timeout=10)


def test_free_port_and_port_zero_pass() -> None:
    check_port_free("127.0.0.1", 0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    check_port_free("127.0.0.1", port)  # bound but not listening any more: free


def test_server_port_clash_with_a_model_port(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "m.gguf")
    config = config_for(tmp_path, ModelConfig(name="m", path="m.gguf", port=18080), server_port=18080)
    with pytest.raises(UserError, match=r"port 18080 of m-0 is also server\.port"):
        plan_launch(config, gpus=[], build=native, capabilities=caps(native), check_ports=False)


def test_build_without_draft_mtp_is_refused(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    """A llama-server without draft-mtp (an older or foreign build) refuses MTP models only."""
    write_gguf(tmp_path / "m.gguf", nextn=1)
    old = caps(native, draft_mtp=False)
    config = config_for(tmp_path, ModelConfig(name="m", path="m.gguf"))
    with pytest.raises(UserError, match="does not support --spec-type draft-mtp"):
        plan_launch(config, gpus=[], build=native, capabilities=old)
    # without speculation the same build is fine
    config = config_for(tmp_path, ModelConfig(name="m", path="m.gguf", speculative=SpeculativeConfig(type="none")))
    assert plan_launch(config, gpus=[], build=native, capabilities=old)[0].argv[0] == str(native.server)


def test_probe_of_a_server_without_draft_mtp(tmp_path: Path) -> None:
    """Fault injection: a llama-server whose --help lacks draft-mtp; the probe says so."""
    old = tmp_path / "old-bin" / "llama-server"
    old.parent.mkdir()
    old.write_text("#!/bin/sh\necho '--spec-type none,ngram-simple'\n")
    old.chmod(old.stat().st_mode | stat.S_IEXEC)
    found = probe_capabilities(build_mod.BuildInfo(bin_dir=old.parent, server=old, lib_dir=old.parent, manifest={}))
    assert (found.backend, found.draft_mtp, found.flags) == ("cpu", False, frozenset({"--spec-type"}))
    assert found.patches == frozenset() and found.features_off  # no manifest: none of our patches is known in it


def test_the_pinned_build_really_has_the_flags_the_plan_uses(real_build: build_mod.BuildInfo) -> None:
    found = probe_capabilities(real_build)
    assert found.draft_mtp and found.backend == real_build.manifest.get("backend", "cpu")
    for flag in (
        "--spec-type",
        "--spec-draft-n-max",
        "--spec-draft-n-min",
        "--spec-draft-p-min",
        "-md",
        "--alias",
        "--metrics",
        "--tensor-split",
        "-ngl",
        "-np",
        "--flash-attn",
        "--fit",
    ):
        assert flag in found.flags, flag


def test_fit_is_off_where_it_could_change_nothing_and_left_to_the_user_or_an_adopted_build(
    tmp_path: Path, native: build_mod.BuildInfo
) -> None:
    """llama-server's --fit could only lower -c and -ngl: off for our own build (the plan sets -c,
    and -ngl or no GPU), saving a load of the model's metadata per start. Left out for a binary
    without the flag, for a model that sets a fit itself, and for an adopted build the plan places
    no layers for (a Vulkan or ROCm build: its fit is what keeps a big model off a small GPU)."""
    write_gguf(tmp_path / "mtp.gguf", nextn=1)
    model = ModelConfig(name="demo", path="mtp.gguf")
    listed = dataclasses.replace(caps(native), flags=frozenset({"--fit", "--spec-type"}))
    [spec] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=listed)
    assert after(spec.argv, "--fit") == "off" and spec.argv.count("--fit") == 1
    [old] = plan_launch(config_for(tmp_path, model), gpus=[], build=native, capabilities=caps(native))
    assert "--fit" not in old.argv and "-fit" not in old.argv
    for own in (["--fit", "on"], ["-fit", "on"], ["--fit=on"], ["-fitt", "2048", "--fit", "on"], ["-fitc", "8192"]):
        [users] = plan_launch(
            config_for(tmp_path, model.model_copy(update={"extra_args": own})),
            gpus=[],
            build=native,
            capabilities=listed,
        )
        assert users.argv[-len(own) :] == tuple(own) and "off" not in users.argv, users.argv
    [by_env] = plan_launch(
        config_for(tmp_path, model.model_copy(update={"env": {"LLAMA_ARG_FIT": "on"}})),
        gpus=[],
        build=native,
        capabilities=listed,
    )
    assert "--fit" not in by_env.argv and by_env.env["LLAMA_ARG_FIT"] == "on"
    adopted = dataclasses.replace(native, manifest={"adopted": True, "patches": []})
    [theirs] = plan_launch(config_for(tmp_path, model), gpus=[], build=adopted, capabilities=listed)
    assert "--fit" not in theirs.argv and "-ngl" not in theirs.argv


def test_every_flag_the_plan_renders_is_refused_in_extra_args(tmp_path: Path, cuda_build: build_mod.BuildInfo) -> None:
    """One table of flags: whatever the plan puts on the command line, extra_args may not repeat."""
    write_gguf(tmp_path / "trunk.gguf")
    write_gguf(tmp_path / "d.gguf", nextn=1, trunk=False)
    model = ModelConfig(
        name="m", path="trunk.gguf", gpus=[0, 1], threads=2, speculative=SpeculativeConfig(p_min=0.5, draft="d.gguf")
    )
    # every flag the plan renders only where the binary lists it, listed
    listed = frozenset({"--fit", "--sse-ping-interval", "--no-reasoning-preserve"})
    [spec] = plan_launch(
        config_for(tmp_path, model),
        gpus=[gpu(0), gpu(1)],
        build=cuda_build,
        capabilities=dataclasses.replace(caps(cuda_build), flags=listed),
    )
    rendered = {a for a in spec.argv[1:] if a.startswith("-") and not a[1:].replace(".", "").isdigit()}
    assert "--tensor-split" in rendered and "-md" in rendered and "--fit" in rendered
    # the one exception: --fit off is a default a model's own --fit replaces (the test above)
    assert rendered - {"--fit"} <= set(PLAN_FLAGS), rendered - set(PLAN_FLAGS)


def test_spec_off_and_k_overrides(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    write_gguf(tmp_path / "trunk.gguf")
    write_gguf(tmp_path / "d.gguf", nextn=1, trunk=False)
    config = config_for(
        tmp_path,
        ModelConfig(
            name="m",
            path="trunk.gguf",
            extra_args=["-fa", "on"],
            speculative=SpeculativeConfig(p_min=0.5, draft="d.gguf"),
        ),
    )
    [spec] = plan_launch(config, gpus=[], build=native, capabilities=caps(native))
    off = without_speculation(spec)
    assert not any(a.startswith("--spec") for a in off.argv) and "-md" not in off.argv
    assert (off.spec_type, off.n_max, off.n_min, off.draft) == (None, None, None, None)
    assert off.argv[-2:] == ("-fa", "on")
    start = spec.argv.index("--spec-type")
    assert off.argv == spec.argv[:start] + spec.argv[start + 10 :]
    k6 = with_draft_length(spec, n_max=6, n_min=1, port=0)
    assert after(k6.argv, "--spec-draft-n-max") == "6" and k6.n_max == 6
    assert spec.n_max == 3  # the original is untouched


def test_render_plan_shows_table_and_exact_commands(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    from rich.console import Console

    write_gguf(tmp_path / "with space.gguf", nextn=1)
    config = config_for(tmp_path, ModelConfig(name="demo", path="with space.gguf"))
    specs = plan_launch(config, gpus=[], build=native, capabilities=caps(native))
    console = Console(width=400, record=True)
    console.print(render_plan(specs))
    out = console.export_text()
    assert "demo-0" in out and "draft-mtp" in out and "3/1" in out and "CPU" in out and "auto" in out
    assert f"'{tmp_path / 'with space.gguf'}'" in out  # shell-quoted for display
    lines = plan_lines(specs)
    assert lines[0] == "demo-0: model demo on CPU, port auto, draft-mtp n_max=3 n_min=1"
    assert "--spec-type draft-mtp --spec-draft-n-max 3 --spec-draft-n-min 1" in lines[1]


@pytest.mark.slow
def test_repo_models_yaml_plans_the_demo(native: build_mod.BuildInfo, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped models.yaml plans out of the box (generates the demo model on first use)."""
    repo = Path(__file__).resolve().parents[2]
    config = load_config(repo / "models.yaml")
    [spec] = plan_launch(config, gpus=[], build=native, capabilities=caps(native), check_ports=False)
    start = spec.argv.index("--spec-type")
    assert list(spec.argv[start : start + 6]) == SPEC_FLAGS
    assert spec.gguf.is_file() and after(spec.argv, "-t") == "2"


# --------------------------------------------------------------------------- with the real tiny models


@pytest.fixture(scope="module")
def tiny_separate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model's headless trunk; its NextN-only draft sits at ``.draft.gguf`` beside it."""
    from orchestrator.models.tiny import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "trunk.gguf", variant="separate", q=0.1)


@pytest.mark.slow
def test_tiny_trunk_alone_has_no_speculation_and_with_its_draft_it_has(
    tiny_separate: Path, native: build_mod.BuildInfo
) -> None:
    draft = tiny_separate.with_suffix(".draft.gguf")
    config = config_for(
        tiny_separate.parent,
        ModelConfig(name="trunk", path=tiny_separate.name),
        ModelConfig(name="pair", path=tiny_separate.name, speculative=SpeculativeConfig(draft=draft.name)),
    )
    trunk, pair = plan_launch(config, gpus=[], build=native, capabilities=caps(native))
    assert not any(a.startswith("--spec") for a in trunk.argv) and trunk.spec_type is None
    start = pair.argv.index("--spec-type")
    assert list(pair.argv[start : start + 8]) == [*SPEC_FLAGS, "-md", str(draft)]
    # the draft file on its own is not a servable model
    with pytest.raises(UserError, match="NextN-only draft"):
        plan_launch(
            config_for(draft.parent, ModelConfig(name="d", path=draft.name)),
            gpus=[],
            build=native,
            capabilities=caps(native),
        )


@pytest.mark.native
@pytest.mark.slow
def test_planned_command_really_serves_with_drafting(tmp_path: Path, real_build: build_mod.BuildInfo) -> None:
    """Run the exact argv + env the plan produced for the demo model: llama-server binds the
    OS-picked port it was given (0), identifies itself by the alias, and drafts with MTP."""
    import re
    import time

    import httpx

    config = config_for(tmp_path, ModelConfig(name="demo", path="builtin:tiny-mtp", ctx_size=512, threads=1))
    [spec] = plan_launch(config, gpus=[], build=real_build, capabilities=probe_capabilities(real_build))
    assert after(spec.argv, "--fit") == "off"
    log = tmp_path / "server.log"
    # without the suite's LLAMA_ARG_FIT=off (conftest.py): the plan's own flag must turn the fit off
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_ARG_FIT"}
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            list(spec.argv),
            env={**env, **spec.env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    try:
        deadline = time.monotonic() + 120
        port = None
        while port is None:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            port = int(found.group(1)) if found else None
            time.sleep(0.1)
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=60) as client:
            while client.get("/health").status_code != 200:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            props = client.get("/props").json()
            assert props["model_alias"] == "demo"
            body = client.post(
                "/v1/chat/completions",
                json={
                    "model": "demo",
                    "messages": [{"role": "user", "content": "count"}],
                    "max_tokens": 24,
                    "temperature": 0,
                    "chat_template_kwargs": {"enable_thinking": False},
                },
            ).json()
            assert body["timings"]["draft_n"] > 0
            assert body["timings"]["draft_n_accepted"] > 0
            assert client.get("/metrics").status_code == 200  # --metrics was passed (501 without it)
        # read back: llama-server logs its fit at -lv 4 ("fitting params to device memory ...") when on
        text = log.read_text(errors="replace")
        assert "llama_model_loader" in text and "fitting params" not in text
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=30)


def test_a_bad_gguf_error_names_the_yaml_line_and_key(tmp_path: Path, native: build_mod.BuildInfo) -> None:
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all")
    (tmp_path / "folder.gguf").mkdir()
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: junk\n    path: junk.gguf\n")
    with pytest.raises(UserError) as info:
        plan_launch(load_config(path), gpus=[], build=native, capabilities=caps(native))
    assert str(info.value).startswith(f"{path}:3: models[0].path: model 'junk': ")
    assert "not a GGUF file" in str(info.value)
    path.write_text("models:\n  - name: dir\n    path: folder.gguf\n")
    with pytest.raises(
        UserError, match=r"models\[0\]\.path: model 'dir': .*folder.gguf is a directory, not a GGUF file"
    ):
        plan_launch(load_config(path), gpus=[], build=native, capabilities=caps(native))
