"""Response repair for streams: split a thinking model's streamed content deltas into
``reasoning_content`` and ``content`` as they pass, holding back only what could be the start of
a tag. The rules, and where streams and whole responses differ, are in
:mod:`orchestrator.serve.repair.response`.

Pure: imports nothing of the package but ``orchestrator.errors`` and the other pure repair module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.serve.repair.response import CONTENT, REASONING, THINK_CLOSE, THINK_OPEN

# Byte patterns whose absence from a raw SSE event proves no tag can start in it. llama-server
# writes JSON with nlohmann::json::dump(), which escapes neither '<' nor '/'; the \u003c forms
# cover any other upstream that escapes HTML-sensitive characters.
_TAG_START_BYTES = (b"<", b"\\u003c", b"\\u003C")


def _partial_tag_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag`` (0 if none)."""
    for k in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class StreamingThinkSplitter:
    """Split one choice's streamed content deltas into reasoning and content.

    Args:
        thinking: whether the request's generation prompt opened ``<think>`` (template
            ``enable_thinking`` not false; :attr:`orchestrator.serve.repair.chat.RepairResult.thinking`). Text
            before any ``</think>`` is streamed as ``reasoning_content`` when true, as ``content``
            when false. A stream that starts with ``<think>`` is reasoning either way.

    ``feed(delta)`` returns ``[(field, text), ...]`` with ``field`` ``"reasoning_content"`` or
    ``"content"``, in order, adjacent pieces of one field merged, no empty texts. It holds back
    only what could still change meaning: the longest suffix that could be the start of
    ``</think>`` (``"</th"`` waits for ``"ink>"``), leading whitespace and a possible ``<think>``
    at the very start, and, inside reasoning, trailing whitespace (dropped if ``</think>``
    follows, so reasoning comes out stripped). ``flush()`` releases what is held at the end of the
    stream. Feeding the text in any chunking gives the same concatenated output.

    If llama-server splits reasoning itself (its ``--reasoning-format deepseek`` default) it sends
    ``reasoning_content`` deltas before any content; call :meth:`note_upstream_reasoning` for them
    (``repair_stream_chunk`` does) and later content is treated as content. Known gap: with
    thinking on, a server that splits reasoning but produced an *empty* reasoning sends no
    reasoning deltas, and its content would be labelled reasoning until a ``</think>`` appears;
    so pass ``thinking=True`` only where the upstream leaves reasoning in the content
    (``reasoning_format: none``) or where that case is acceptable.
    """

    def __init__(self, thinking: bool) -> None:
        self.thinking = thinking
        self._phase = "start"  # start | reasoning_lstrip | before | content_lstrip | content
        self._field = REASONING if thinking else CONTENT  # field of text before </think>
        self._pending = ""
        self.split_seen = False  # a tag was consumed or content text became reasoning
        self.reported: set[str] = set()  # repair kinds already counted for this choice

    @property
    def idle(self) -> bool:
        """True when a delta without ``<`` would come out unchanged, as content, so the proxy may
        skip parsing it: nothing held, no relabelling or whitespace stripping in progress."""
        return not self._pending and (self._phase == "content" or (self._phase == "before" and self._field == CONTENT))

    def feed(self, delta: str) -> list[tuple[str, str]]:
        """Take the next content delta; return the pieces that can be emitted now."""
        self._pending += delta
        out: list[tuple[str, str]] = []
        self._run(out, final=False)
        return _merge(out)

    def flush(self) -> list[tuple[str, str]]:
        """End of stream: return whatever was held back (a partial tag is plain text then)."""
        out: list[tuple[str, str]] = []
        self._run(out, final=True)
        return _merge(out)

    def note_upstream_reasoning(self) -> list[tuple[str, str]]:
        """The upstream sent a ``reasoning_content`` delta itself: it is splitting reasoning, so
        from now on content before a (stray) ``</think>`` is content. Returns held-back reasoning
        that must be emitted before the upstream's reasoning delta."""
        out: list[tuple[str, str]] = []
        if self._field == REASONING and self._phase != "content_lstrip" and self._phase != "content":
            if self._phase != "start":
                held = self._pending.rstrip()  # whitespace and a partial tag: reasoning after all
                if held:
                    out.append((REASONING, held))
                self._pending = ""
                self._phase = "before"
            self._field = CONTENT
        return out

    def _emit(self, out: list[tuple[str, str]], field: str, text: str) -> None:
        if text:
            if field == REASONING:
                self.split_seen = True
            out.append((field, text))

    def _run(self, out: list[tuple[str, str]], *, final: bool) -> None:
        while True:
            p = self._pending
            if self._phase == "start":
                s = p.lstrip()
                if s.startswith(THINK_OPEN):
                    self._pending = s[len(THINK_OPEN) :]
                    self._phase, self._field = "reasoning_lstrip", REASONING
                    self.split_seen = True
                    continue
                if not final and (not s or THINK_OPEN.startswith(s)):
                    return  # still possibly "<think>"
                self._phase = "before"
                if self._field == REASONING:
                    self._pending = s
                continue
            if self._phase in ("reasoning_lstrip", "content_lstrip"):
                s = p.lstrip()
                self._pending = s
                if not s:
                    return
                self._phase = "before" if self._phase == "reasoning_lstrip" else "content"
                continue
            if self._phase == "before":
                idx = p.find(THINK_CLOSE)
                if idx >= 0:
                    head = p[:idx]
                    self._emit(out, self._field, head.rstrip() if self._field == REASONING else head)
                    self._pending = p[idx + len(THINK_CLOSE) :]
                    self._phase = "content_lstrip"
                    self.split_seen = True
                    continue
                if final:
                    self._emit(out, self._field, p.rstrip() if self._field == REASONING else p)
                    self._pending = ""
                    return
                head = p[: len(p) - _partial_tag_suffix(p, THINK_CLOSE)]
                if self._field == REASONING:
                    head = head.rstrip()  # trailing whitespace waits: it may precede </think>
                self._emit(out, self._field, head)
                self._pending = p[len(head) :]
                return
            # content: everything after the first </think> passes through
            self._emit(out, CONTENT, p)
            self._pending = ""
            return


def _merge(pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    merged: list[tuple[str, str]] = []
    for field, text in pieces:
        if not text:
            continue
        if merged and merged[-1][0] == field:
            merged[-1] = (field, merged[-1][1] + text)
        else:
            merged.append((field, text))
    return merged


def repair_stream_chunk(
    chunk: dict[str, Any], splitters: dict[int, StreamingThinkSplitter], *, thinking: bool
) -> tuple[dict[str, Any], list[str]]:
    """Repair one parsed SSE chunk of a streamed chat completion.

    Args:
        chunk: the JSON of one ``data:`` event (``{"choices": [{"index", "delta", "finish_reason"}]}``).
            Never mutated.
        splitters: per-stream state, one :class:`StreamingThinkSplitter` per choice index; start
            with ``{}`` and pass the same dict for every chunk of the stream.
        thinking: whether the request had thinking on.

    Returns:
        ``(chunk, kinds)``: the same object when nothing changed, else a new chunk whose changed
        deltas carry the repaired ``reasoning_content`` / ``content`` (a key is absent when it has
        no text in this chunk). A choice's held-back text is released in the chunk carrying its
        ``finish_reason``. ``kinds`` names ``"think_split"`` / ``"reasoning_moved_to_content"``
        once per choice per stream, when first applied.

    Upstream ``reasoning_content`` deltas pass through when thinking is on (and tell the splitter
    that the server splits reasoning itself); with thinking off they are streamed as content.
    """
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return chunk, []
    kinds: list[str] = []
    new_choices: list[Any] = []
    changed = False
    for choice in choices:
        fixed = _repair_stream_choice(choice, splitters, thinking, kinds) if isinstance(choice, dict) else None
        changed = changed or fixed is not None
        new_choices.append(choice if fixed is None else fixed)
    if not changed:
        return chunk, kinds
    return {**chunk, "choices": new_choices}, kinds


def _repair_stream_choice(
    choice: dict[str, Any], splitters: dict[int, StreamingThinkSplitter], thinking: bool, kinds: list[str]
) -> dict[str, Any] | None:
    """One choice of a stream chunk repaired, or None when it passes unchanged; new kinds go to ``kinds``."""
    index = choice.get("index", 0)
    splitter = splitters.get(index)
    if splitter is None:
        splitter = splitters[index] = StreamingThinkSplitter(thinking)
    delta = choice.get("delta")
    delta = delta if isinstance(delta, dict) else {}
    rc, content = delta.get(REASONING), delta.get(CONTENT)
    pieces = _delta_pieces(rc, content, splitter, thinking, kinds)
    if choice.get("finish_reason") is not None:
        pieces += splitter.flush()
    if splitter.split_seen and "think_split" not in splitter.reported:
        splitter.reported.add("think_split")
        kinds.append("think_split")
    out = {REASONING: "", CONTENT: ""}
    for field, text in pieces:
        out[field] += text
    if out[REASONING] == (rc or "") and out[CONTENT] == (content or ""):
        return None
    new_delta = {k: v for k, v in delta.items() if k not in (REASONING, CONTENT)}
    for field in (REASONING, CONTENT):
        if out[field]:
            new_delta[field] = out[field]
    return {**choice, "delta": new_delta}


def _delta_pieces(
    rc: Any, content: Any, splitter: StreamingThinkSplitter, thinking: bool, kinds: list[str]
) -> list[tuple[str, str]]:
    """The (field, text) pieces a delta's upstream ``reasoning_content`` and ``content`` become."""
    pieces: list[tuple[str, str]] = []
    if isinstance(rc, str) and rc:
        if thinking:
            pieces += splitter.note_upstream_reasoning()
            pieces.append((REASONING, rc))
        else:
            pieces += splitter.feed(rc)
            if "reasoning_moved_to_content" not in splitter.reported:
                splitter.reported.add("reasoning_moved_to_content")
                kinds.append("reasoning_moved_to_content")
    if isinstance(content, str) and content:
        pieces += splitter.feed(content)
    return pieces


class StreamRepair:
    """Per-stream response repair with a cheap pre-check, for the proxy's SSE loop.

    Usage, per upstream ``data:`` payload ``raw`` (bytes, without the ``data: `` prefix)::

        fix = StreamRepair(thinking=result.thinking, n=body.get("n", 1))
        for raw in events:
            if raw == b"[DONE]":
                tail = fix.finish()            # a last chunk if text is still held, else None
                ...
            elif fix.needs_parse(raw):
                chunk, kinds = fix.repair(json.loads(raw))
                ...                            # re-serialise only if chunk changed
            else:
                ...                            # forward raw bytes untouched

    :meth:`needs_parse` is false, and the bytes can be forwarded untouched, exactly when the event
    cannot change: every choice's splitter has been created (``n`` of them) and is idle (nothing
    held, plain content passing through), and the bytes contain no ``<`` (so no tag can start)
    and, with thinking off, no ``reasoning_content`` to relabel. In a thinking-on stream every
    event is parsed until ``</think>`` (or upstream reasoning) is seen, since its content must be
    relabelled; after that only events holding a ``<``.
    """

    def __init__(self, *, thinking: bool, n: int = 1) -> None:
        self.thinking = thinking
        self.n = n if isinstance(n, int) and n > 0 else 1
        self.splitters: dict[int, StreamingThinkSplitter] = {}
        self._last: dict[str, Any] | None = None

    def needs_parse(self, raw: bytes) -> bool:
        """Whether the event ``raw`` (bytes) must be parsed and passed to :meth:`repair`."""
        if len(self.splitters) < self.n or not all(s.idle for s in self.splitters.values()):
            return True
        if any(p in raw for p in _TAG_START_BYTES):
            return True
        return not self.thinking and b"reasoning_content" in raw

    def repair(self, chunk: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """:func:`repair_stream_chunk` with this stream's splitters."""
        self._last = chunk
        return repair_stream_chunk(chunk, self.splitters, thinking=self.thinking)

    def finish(self) -> dict[str, Any] | None:
        """The stream ended (``[DONE]`` or the upstream closed): a final chunk carrying held-back
        text of choices that never sent a ``finish_reason``, or None when nothing is held."""
        choices = []
        for index, splitter in sorted(self.splitters.items()):
            pieces = splitter.flush()
            if pieces:
                delta: dict[str, str] = {}
                for field, text in pieces:
                    delta[field] = delta.get(field, "") + text
                choices.append({"index": index, "delta": delta, "finish_reason": None})
        if not choices:
            return None
        base = {k: v for k, v in (self._last or {}).items() if k in ("id", "object", "created", "model")}
        return {**base, "choices": choices}


def _server_splits_reasoning(body: dict[str, Any], extra_args: Sequence[str]) -> bool:
    """Whether llama-server will put reasoning in ``reasoning_content`` itself.

    It does unless the request's ``reasoning_format`` or the model's ``--reasoning-format``
    launch flag (in ``extra_args``) is ``none`` (``common/arg.cpp``; default ``auto``, which
    extracts it).
    """
    fmt = body.get("reasoning_format")
    if fmt is None:
        for i, arg in enumerate(extra_args):
            if arg == "--reasoning-format" and i + 1 < len(extra_args):
                fmt = extra_args[i + 1]
            elif arg.startswith("--reasoning-format="):
                fmt = arg.split("=", 1)[1]
    return fmt != "none"


def continues_content(body: dict[str, Any]) -> bool:
    """Whether the request ends with an assistant prefill whose text the answer continues: the
    generation prompt then closes the think block before the prefill (``common_chat_templates_apply``
    resolves ``continue_final_message`` to content unless the prefill holds only reasoning), so the
    answer is content from its first token."""
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return False
    content = last.get("content")
    return bool(content) or not last.get("reasoning_content")


def repair_for_stream(body: dict[str, Any], thinking: bool, extra_args: Sequence[str]) -> StreamRepair | None:
    """The response repair a chat stream needs, or None to pass its bytes through untouched.

    Args:
        body: the request body as sent upstream.
        thinking: whether the request runs with thinking on.
        extra_args: the model's ``extra_args`` (a ``--reasoning-format`` there counts).

    - thinking off: reasoning that still arrives is moved to content, and a stray ``</think>``
      is split off;
    - thinking on and llama-server leaves reasoning in the content (``reasoning_format: none``):
      the content before ``</think>`` is relabelled ``reasoning_content``, unless the request ends
      with an assistant prefill of text (:func:`continues_content`): that answer is content;
    - thinking on and llama-server splits reasoning itself (its default): nothing to repair. The
      splitter is not used there on purpose: when the model's reasoning is empty the server sends
      only content deltas, which a thinking-on splitter would relabel as reasoning.
    """
    n = body.get("n", 1)
    if not thinking:
        return StreamRepair(thinking=False, n=n)
    if not _server_splits_reasoning(body, extra_args):
        return StreamRepair(thinking=not continues_content(body), n=n)
    return None
