"""``bench --apply``: the draft length goes into models.yaml with comments and layout kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.config.load import load_config
from orchestrator.config.yaml_edit import set_draft_length
from orchestrator.errors import UserError

REPO = Path(__file__).resolve().parents[2]

SMALL = """\
# models served by the orchestrator (a test copy)
server:
  port: 8080          # the one endpoint

models:
  # the generated demo model
  - name: demo
    path: builtin:tiny-mtp
    aliases: [tiny, "echo-model"]
    speculative:
      type: draft-mtp   # NextN head
      n_max: 3          # draft length K, tuned by orchestrator bench
      n_min: 2
  - name: other       # a second model without a speculative block
    path: builtin:tiny-mtp
"""


@pytest.fixture
def small_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(SMALL, encoding="utf-8")
    return path


def test_sets_n_max_and_keeps_every_comment(small_yaml: Path) -> None:
    diff = set_draft_length(small_yaml, "demo", 4)
    text = small_yaml.read_text()
    assert "      n_max: 4          # draft length K, tuned by orchestrator bench\n" in text
    for line in SMALL.splitlines():
        if "n_max" not in line:
            assert line in text.splitlines(), line
    assert "-      n_max: 3" in diff and "+      n_max: 4" in diff
    assert load_config(small_yaml).model("demo").speculative.n_max == 4


def test_lowers_n_min_when_it_would_exceed_k(small_yaml: Path) -> None:
    set_draft_length(small_yaml, "tiny", 1)  # by alias
    spec = load_config(small_yaml).model("demo").speculative
    assert (spec.n_max, spec.n_min) == (1, 1)


def test_creates_the_block_for_a_model_without_one(small_yaml: Path) -> None:
    set_draft_length(small_yaml, "other", 2)
    text = small_yaml.read_text()
    assert text.startswith(SMALL.splitlines()[0])
    assert "  - name: other       # a second model without a speculative block\n" in text
    assert load_config(small_yaml).model("other").speculative.n_max == 2


def test_k0_turns_speculation_off_and_stays_valid(small_yaml: Path) -> None:
    set_draft_length(small_yaml, "demo", 0)
    spec = load_config(small_yaml).model("demo").speculative
    assert spec.type == "none"
    assert "n_max" not in small_yaml.read_text().split("- name: other")[0]
    assert "# the generated demo model" in small_yaml.read_text()


def test_no_change_gives_empty_diff_and_same_bytes(small_yaml: Path) -> None:
    before = small_yaml.read_bytes()
    assert set_draft_length(small_yaml, "demo", 3) == ""
    assert small_yaml.read_bytes() == before


def test_unknown_model_names_the_choices(small_yaml: Path) -> None:
    with pytest.raises(UserError) as err:
        set_draft_length(small_yaml, "nope", 2)
    assert "nope" in str(err.value) and "demo, other" in (err.value.hint or "")


def test_repo_models_yaml_round_trip(tmp_path: Path) -> None:
    src = REPO / "models.yaml"
    if not src.is_file():
        pytest.skip("the repository has no models.yaml yet")
    copy = tmp_path / "models.yaml"
    shutil.copy(src, copy)
    name = load_config(copy).models[0].name
    original = src.read_text().splitlines()
    diff = set_draft_length(copy, name, 5)
    after = copy.read_text().splitlines()
    # only n_max (and n_min when above 5) lines differ; every comment line survives
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed and all("n_max" in line or "n_min" in line or "speculative" in line for line in changed)
    assert [line for line in original if line.lstrip().startswith("#")] == [
        line for line in after if line.lstrip().startswith("#")
    ]
    assert load_config(copy).model(name).speculative.n_max == 5


def test_k0_and_back_keep_the_comment_lines_after_the_block(tmp_path: Path) -> None:
    """`bench --apply` picking K=0 on a CPU must not delete the commented GPU entry below the block.

    ruamel.yaml stores the comment lines after a mapping's last key on that key, so deleting
    ``n_min`` used to take the whole commented Qwen3.6 entry of models.yaml with it.
    """
    copy = tmp_path / "models.yaml"
    shutil.copy(REPO / "models.yaml", copy)
    name = load_config(copy).models[0].name
    full_lines = [line for line in copy.read_text().splitlines() if line.lstrip().startswith("#")]
    kept = [line for line in full_lines if "n_max" not in line.split("#")[0] or line.lstrip().startswith("#")]
    set_draft_length(copy, name, 0)
    assert load_config(copy).model(name).speculative.type == "none"
    after_off = copy.read_text()
    assert "# - name: qwen3.6-35b-a3b" in after_off
    set_draft_length(copy, name, 2)
    assert load_config(copy).model(name).speculative.n_max == 2
    after_on = copy.read_text()
    assert "# - name: qwen3.6-35b-a3b" in after_on
    assert [line for line in after_on.splitlines() if line.lstrip().startswith("#")] == kept
