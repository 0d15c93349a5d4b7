"""The chat template a model is launched with: cache-stable history (``models[].preserve_thinking``).

``preserve_thinking`` null (the default) turns it on where the GGUF's template allows it
(``orchestrator.models.stable_template``), true requires it, false leaves the template as it is
(and the plan passes ``--no-reasoning-preserve``: the pin keeps earlier reasoning by default).
A rewritten template is written once under the cache folder, named by its hash. A model whose
``extra_args`` choose their own template or template arguments is left alone (and told so).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.schema import Config, ModelConfig
from orchestrator.errors import UserError
from orchestrator.host import disk
from orchestrator.models.gguf_header import read_header
from orchestrator.models.stable_template import cache_stable
from orchestrator.paths import cache_root

_OWN = ("--chat-template", "--chat-template-file", "--chat-template-kwargs")


def template_args(config: Config, i: int, model: ModelConfig, gguf: Path) -> tuple[Path | None, str | None, list[str]]:
    """``(template file or None, --chat-template-kwargs or None, notes)`` for ``model``'s launch.

    Raises:
        UserError: ``preserve_thinking: true`` with a template that cannot keep earlier turns.
    """
    if model.preserve_thinking is False:
        return None, None, []
    if any(arg.split("=")[0] in _OWN for arg in model.extra_args):
        return None, None, ["extra_args choose the chat template: history is rendered as that template does"]
    text = read_header(gguf, keep_string_arrays=()).metadata.get("tokenizer.chat_template")
    stable = cache_stable(text if isinstance(text, str) else None)
    if stable is None:
        if model.preserve_thinking:
            raise UserError(
                f"{config.where('models', i, 'preserve_thinking')}: model {model.name!r}: its chat template "
                "cannot keep earlier turns' reasoning (no preserve_thinking switch, not a Qwen3.5-style template)",
                hint="remove preserve_thinking, or pass a template that has it (extra_args --chat-template-file)",
            )
        return None, None, []
    if stable.text is None:
        return None, stable.kwargs, []
    path = cache_root() / "templates" / stable.file_name()
    if not path.is_file() and disk.make_folder("chat templates", path.parent) is not None:
        written = stable.text
        disk.attempt("chat templates", path, lambda: path.write_text(written, encoding="utf-8"))
    if not path.is_file():  # a full or read-only cache: the template as it is, and say so
        return None, None, [f"could not write {path}: earlier turns are rendered as the GGUF's template does"]
    return path, stable.kwargs, []
