"""The in-process llama.cpp runtime: vocabulary and chat template of a GGUF, from our own build.

llama-cpp-python is installed without its native library; it loads ``libllama.so`` from the
native build (``LLAMA_CPP_LIB_PATH=locate().lib_dir``), so llama-server and this runtime
always agree on the tokenizer. Only the vocabulary is loaded (``vocab_only=True``): no
weights, a fraction of a second even for a 20 GB GGUF.

Chat templates are rendered with Jinja2 the way llama-cpp-python and Transformers do
(sandboxed, ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``, ``tojson`` without ASCII
escaping). A template's ``raise_exception('...')`` becomes ``ChatTemplateError`` whose
``rule`` is the template's own sentence, e.g. ``System message must be at the beginning.``
"""

from __future__ import annotations

import atexit
import ctypes
import json
import logging
import os
import sys
import threading
import weakref
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.native.build import locate, preload_runtime_libraries

log = logging.getLogger("orchestrator.llama")
log.addHandler(logging.NullHandler())  # llama.cpp's chatter stays quiet unless logging is configured

# ggml_log_level in ggml.h of the pin (NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5);
# llama-cpp-python 0.3.36's own callback assumes an older order and prints warnings as errors.
_GGML_LEVELS = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_last_level = logging.DEBUG
_log_callback: Any = None  # kept referenced: ctypes callbacks must outlive their registration
_import_lock = threading.Lock()


class ChatTemplateError(UserError):
    """A chat template refused the messages. ``rule`` is the template's ``raise_exception``
    text (e.g. ``No user query found in messages.``), or None for any other render failure."""

    def __init__(self, message: str, rule: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.rule = rule


class _TemplateRaised(Exception):
    """Raised by the ``raise_exception`` global passed to templates."""


def _llama_cpp() -> Any:
    """Import ``llama_cpp`` bound to the native build's libllama (once per process).

    Raises ``UserError`` when there is no build or its library does not load.
    """
    with _import_lock:
        if "llama_cpp" not in sys.modules:
            build = locate()
            lib_dir = build.lib_dir
            os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
            try:
                preload_runtime_libraries(build)  # a CUDA build's libcudart/libcublas outside the loader's path
                import llama_cpp
            except (OSError, RuntimeError) as err:
                raise UserError(
                    f"could not load libllama from {lib_dir}: {err}", hint="run `orchestrator build`"
                ) from None
            _route_llama_logs(llama_cpp)
        import llama_cpp

        return llama_cpp


def _route_llama_logs(llama_cpp: Any) -> None:
    global _log_callback

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]  # llama_cpp ships no type hints
    def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        global _last_level
        py_level = _last_level if level == 5 else _GGML_LEVELS.get(level, logging.DEBUG)
        _last_level = py_level
        if log.isEnabledFor(py_level):
            log.log(py_level, text.decode("utf-8", errors="replace").rstrip("\n"))

    _log_callback = callback
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


class Vocab:
    """A GGUF's tokenizer, loaded vocab-only through libllama.

    Attributes:
        path: the GGUF.
        n_vocab: number of tokens.
        bos_id / eos_id: token ids, or None when the vocabulary has none.
        chat_template: ``tokenizer.chat_template`` from the header, or None.
    """

    def __init__(self, path: Path) -> None:
        llama_cpp = _llama_cpp()
        self.path = path
        try:
            self._llama = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        except (ValueError, RuntimeError) as err:
            raise UserError(f"could not load the vocabulary of {path}: {err}", hint="is it a GGUF file?") from None
        self._lock = threading.Lock()  # llama_tokenize is not documented as thread-safe
        self.n_vocab: int = self._llama.n_vocab()
        self.bos_id: int | None = _token_or_none(self._llama.token_bos())
        self.eos_id: int | None = _token_or_none(self._llama.token_eos())
        self.chat_template: str | None = self._llama.metadata.get("tokenizer.chat_template")
        _open_vocabs.add(self)

    def close(self) -> None:
        """Free the native vocabulary now (idempotent); the Vocab is unusable afterwards."""
        with self._lock:
            self._llama.close()

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``. Defaults match llama-server's ``/tokenize``: no BOS added,
        special tokens such as ``<|im_start|>`` parsed as themselves."""
        with self._lock:
            return list(self._llama.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special))

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens rendered as their text)."""
        with self._lock:
            return bytes(self._llama.detokenize(list(ids), special=True)).decode("utf-8", errors="replace")

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry of one token, e.g. ``<|im_end|>``."""
        with self._lock:
            return str(self._llama._model.token_get_text(token_id))


# Every Vocab still alive, closed at exit: left to garbage collection at interpreter shutdown,
# llama_cpp's __del__ runs after its module globals are gone and prints "Exception ignored".
_open_vocabs: weakref.WeakSet[Vocab] = weakref.WeakSet()


@atexit.register
def _close_open_vocabs() -> None:
    _load_vocab_cached.cache_clear()
    for vocab in list(_open_vocabs):
        vocab.close()


def _token_or_none(token_id: int) -> int | None:
    return token_id if token_id >= 0 else None


def load_vocab(path: Path | str) -> Vocab:
    """Load (once per file version) the vocabulary of the GGUF at ``path``.

    Raises ``UserError`` when the file is missing, is not a GGUF, or there is no native build.
    """
    path = Path(path).expanduser().resolve()
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise UserError(f"model file not found: {path}") from None
    return _load_vocab_cached(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _load_vocab_cached(path: Path, mtime_ns: int, size: int) -> Vocab:
    return Vocab(path)


def render_chat(
    path: Path | str,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool = True,
    enable_thinking: bool | None = None,
    tools: list[dict[str, Any]] | None = None,
    template: str | None = None,
    kwargs: dict[str, Any] | None = None,
) -> str:
    """Render ``messages`` with the GGUF's own chat template (or ``template``, the one the server was
    launched with, and its ``--chat-template-kwargs`` ``kwargs``): the prompt text llama-server
    would build (before tokenization).

    Raises ``ChatTemplateError`` when the template refuses the messages (``.rule`` quotes it)
    and ``UserError`` when the GGUF has no template.
    """
    vocab = load_vocab(path)
    if not vocab.chat_template:
        raise UserError(f"{vocab.path} has no tokenizer.chat_template", hint="pass a model with a chat template")
    bos = vocab.token_text(vocab.bos_id) if vocab.bos_id is not None else ""
    eos = vocab.token_text(vocab.eos_id) if vocab.eos_id is not None else ""
    return render_template(
        template or vocab.chat_template,
        messages,
        bos_token=bos,
        eos_token=eos,
        add_generation_prompt=add_generation_prompt,
        enable_thinking=enable_thinking,
        tools=tools,
        kwargs=kwargs,
    )


def render_template(
    template: str,
    messages: list[dict[str, Any]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    enable_thinking: bool | None = None,
    tools: list[dict[str, Any]] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> str:
    """Render a Jinja chat ``template`` (the text of ``tokenizer.chat_template``); ``kwargs`` are
    more template variables (a server's ``--chat-template-kwargs``).

    ``enable_thinking=None`` leaves the variable undefined, so the template's default
    applies. Raises ``ChatTemplateError`` as ``render_chat`` does.
    """
    from jinja2 import TemplateError

    try:
        compiled = _compile(template)
    except TemplateError as err:
        raise ChatTemplateError(f"the chat template does not parse: {err}") from None
    context: dict[str, Any] = {
        **(kwargs or {}),
        "messages": messages,
        "bos_token": bos_token,
        "eos_token": eos_token,
        "add_generation_prompt": add_generation_prompt,
    }
    if tools is not None:
        context["tools"] = tools
    if enable_thinking is not None:
        context["enable_thinking"] = enable_thinking
    try:
        return str(compiled.render(**context))
    except _TemplateRaised as err:
        rule = str(err)
        raise ChatTemplateError(f"the chat template rejected the messages: {rule}", rule=rule) from None
    except (TemplateError, TypeError, ValueError, AttributeError, KeyError, IndexError) as err:
        raise ChatTemplateError(f"the chat template failed on these messages: {type(err).__name__}: {err}") from None


@lru_cache(maxsize=16)
def _compile(template: str) -> Any:
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
