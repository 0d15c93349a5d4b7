"""Response repair: put a thinking model's reasoning in ``reasoning_content``, not in ``content``.

Qwen3.5's generation prompt ends in ``<think>\\n`` unless ``enable_thinking`` is false (see
``orchestrator.serve.request_repair``), so the model never prints the opening tag itself: its raw text is
``reasoning</think>\\n\\nanswer``. llama-server's reasoning parser (``--reasoning-format``, default
``deepseek``) normally splits that into ``reasoning_content`` and ``content``; when it does not
(``reasoning_format: none`` in a request, a template it does not recognise, a parser miss) the
client gets the reasoning and the bare ``</think>`` in its answer (case R01). The functions here
repair that, for whole responses and for streams.

Rules, both paths:
    * the text before the first ``</think>`` is reasoning, the text after it is content; a
      leading ``<think>`` (a model that prints the full pair) is removed;
    * reasoning is stripped at both ends; content has its leading whitespace stripped (the
      template itself renders ``'\\n</think>\\n\\n'`` around the tag);
    * a response to a request with thinking off whose answer came back only in
      ``reasoning_content`` gets it moved to ``content``.

Where streaming and non-streamed output differ, by necessity:
    * trailing whitespace of the content: a whole response has it stripped; a stream cannot
      know a whitespace token is the last one without delaying every such token, so it keeps it;
    * text before any ``</think>`` is ambiguous while streaming. With thinking on it is streamed as
      ``reasoning_content`` (the prompt opened ``<think>``); with thinking off as ``content``
      (the prompt already closed the block). A whole response is split only when it contains the
      tag, so thinking-on text cut off before ``</think>`` stays ``content`` there.
"""

from __future__ import annotations

from typing import Any

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
REASONING = "reasoning_content"
CONTENT = "content"

# Byte patterns whose absence from a raw SSE event proves no tag can start in it. llama-server
# writes JSON with nlohmann::json::dump(), which escapes neither '<' nor '/'; the \u003c forms
# cover any other upstream that escapes HTML-sensitive characters.
_TAG_START_BYTES = (b"<", b"\\u003c", b"\\u003C")


def split_reasoning(text: str) -> tuple[str | None, str]:
    """Split raw model text into ``(reasoning, content)``.

    Args:
        text: an assistant message's ``content`` as the model printed it.

    Returns:
        ``(None, text)`` unchanged when there is no ``</think>`` and no leading ``<think>``.
        Otherwise the reasoning (text before the first ``</think>``, minus a leading ``<think>``)
        and the content (text after it), both stripped; a leading ``<think>`` with no closing tag
        gives ``(reasoning, "")`` (the model ran out of tokens while thinking). R01:
        ``"The user greets me.\\n</think>\\n\\nHello there!"`` gives
        ``("The user greets me.", "Hello there!")``.

    The first ``</think>`` ends the reasoning, as in :class:`StreamingThinkSplitter`, which cannot
    wait to see whether another one follows.
    """
    stripped = text.lstrip()
    opened = stripped.startswith(THINK_OPEN)
    body = stripped[len(THINK_OPEN) :] if opened else text
    idx = body.find(THINK_CLOSE)
    if idx < 0:
        return (body.strip(), "") if opened else (None, text)
    return body[:idx].strip(), body[idx + len(THINK_CLOSE) :].strip()


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
            ``enable_thinking`` not false; :attr:`orchestrator.serve.request_repair.RepairResult.thinking`). Text
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


def _blank(value: Any) -> bool:
    return not (isinstance(value, str) and value.strip())


def repair_response(body: dict[str, Any], *, thinking: bool) -> tuple[dict[str, Any], list[str]]:
    """Repair a non-streamed chat completion.

    Args:
        body: the parsed upstream response (``{"choices": [{"message": {...}}, ...], ...}``).
            Never mutated.
        thinking: whether the request had thinking on (:attr:`orchestrator.serve.request_repair.RepairResult.thinking`).

    Returns:
        ``(body, kinds)``. ``kinds`` lists ``"think_split"`` when a message's content held
        ``</think>`` (or began with ``<think>``) and was split with :func:`split_reasoning` (the
        reasoning is appended to any ``reasoning_content`` already there), and
        ``"reasoning_moved_to_content"`` when thinking was off and a message without
        ``tool_calls`` came back with empty content but non-empty ``reasoning_content``, which
        then becomes the content. ``body`` is the same object when ``kinds`` is empty, else a new
        dict sharing all untouched values.
    """
    choices = body.get("choices")
    if not isinstance(choices, list):
        return body, []
    kinds: list[str] = []
    new_choices: list[Any] = []
    changed = False
    for choice in choices:
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict):
            new_choices.append(choice)
            continue
        content, reasoning = msg.get("content"), msg.get("reasoning_content")
        new_msg: dict[str, Any] | None = None
        if isinstance(content, str) and (THINK_CLOSE in content or content.lstrip().startswith(THINK_OPEN)):
            r, c = split_reasoning(content)
            new_msg = dict(msg)
            new_msg["content"] = c
            if r:
                new_msg["reasoning_content"] = reasoning.strip() + "\n\n" + r if not _blank(reasoning) else r
            if "think_split" not in kinds:
                kinds.append("think_split")
        cur = new_msg if new_msg is not None else msg
        if (
            not thinking
            and _blank(cur.get("content"))
            and not _blank(cur.get("reasoning_content"))
            and not cur.get("tool_calls")
        ):
            new_msg = dict(cur)
            new_msg["content"] = new_msg.pop("reasoning_content")
            if "reasoning_moved_to_content" not in kinds:
                kinds.append("reasoning_moved_to_content")
        if new_msg is None:
            new_choices.append(choice)
        else:
            changed = True
            new_choices.append({**choice, "message": new_msg})
    if not changed:
        return body, []
    return {**body, "choices": new_choices}, kinds


def is_reasoning_only(body: dict[str, Any]) -> bool:
    """True when every choice of a (repaired) non-streamed completion has empty content, no
    ``tool_calls`` and non-empty ``reasoning_content``: the model thought but never answered.

    The proxy applies the model's ``on_reasoning_only`` policy (``pass`` or
    ``retry_without_thinking``) to such a response. Call it after :func:`repair_response`.
    """
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    for choice in choices:
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict):
            return False
        if not _blank(msg.get("content")) or msg.get("tool_calls") or _blank(msg.get("reasoning_content")):
            return False
    return True


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
        if not isinstance(choice, dict):
            new_choices.append(choice)
            continue
        index = choice.get("index", 0)
        splitter = splitters.get(index)
        if splitter is None:
            splitter = splitters[index] = StreamingThinkSplitter(thinking)
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        pieces: list[tuple[str, str]] = []
        rc, content = delta.get(REASONING), delta.get(CONTENT)
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
        if choice.get("finish_reason") is not None:
            pieces += splitter.flush()
        if splitter.split_seen and "think_split" not in splitter.reported:
            splitter.reported.add("think_split")
            kinds.append("think_split")
        out = {REASONING: "", CONTENT: ""}
        for field, text in pieces:
            out[field] += text
        if out[REASONING] == (rc or "") and out[CONTENT] == (content or ""):
            new_choices.append(choice)
            continue
        changed = True
        new_delta = {k: v for k, v in delta.items() if k not in (REASONING, CONTENT)}
        for field in (REASONING, CONTENT):
            if out[field]:
                new_delta[field] = out[field]
        new_choices.append({**choice, "delta": new_delta})
    if not changed:
        return chunk, kinds
    return {**chunk, "choices": new_choices}, kinds


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
