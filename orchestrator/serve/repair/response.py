"""Response repair: put a thinking model's reasoning in ``reasoning_content``, not in ``content``.

Qwen3.5's generation prompt ends in ``<think>\\n`` unless ``enable_thinking`` is false (see
``orchestrator.serve.repair.chat``), so the model never prints the opening tag itself: its raw text is
``reasoning</think>\\n\\nanswer``. llama-server's reasoning parser (``--reasoning-format``, default
``deepseek``) normally splits that into ``reasoning_content`` and ``content``; when it does not
(``reasoning_format: none`` in a request, a template it does not recognise, a parser miss) the
client gets the reasoning and the bare ``</think>`` in its answer. The functions here repair
that for whole responses; :mod:`orchestrator.serve.repair.stream` does it for streams.

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


def split_reasoning(text: str) -> tuple[str | None, str]:
    """Split raw model text into ``(reasoning, content)``.

    Args:
        text: an assistant message's ``content`` as the model printed it.

    Returns:
        ``(None, text)`` unchanged when there is no ``</think>`` and no leading ``<think>``.
        Otherwise the reasoning (text before the first ``</think>``, minus a leading ``<think>``)
        and the content (text after it), both stripped; a leading ``<think>`` with no closing tag
        gives ``(reasoning, "")`` (the model ran out of tokens while thinking). For example
        ``"The user greets me.\\n</think>\\n\\nHello there!"`` gives
        ``("The user greets me.", "Hello there!")``.

    The first ``</think>`` ends the reasoning, as in
    :class:`~orchestrator.serve.repair.stream.StreamingThinkSplitter`, which cannot
    wait to see whether another one follows.
    """
    stripped = text.lstrip()
    opened = stripped.startswith(THINK_OPEN)
    body = stripped[len(THINK_OPEN) :] if opened else text
    idx = body.find(THINK_CLOSE)
    if idx < 0:
        return (body.strip(), "") if opened else (None, text)
    return body[:idx].strip(), body[idx + len(THINK_CLOSE) :].strip()


def _blank(value: Any) -> bool:
    return not (isinstance(value, str) and value.strip())


def repair_response(body: dict[str, Any], *, thinking: bool) -> tuple[dict[str, Any], list[str]]:
    """Repair a non-streamed chat completion.

    Args:
        body: the parsed upstream response (``{"choices": [{"message": {...}}, ...], ...}``).
            Never mutated.
        thinking: whether the request had thinking on (:attr:`orchestrator.serve.repair.chat.RepairResult.thinking`).

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
                earlier = reasoning.strip() if isinstance(reasoning, str) else ""
                new_msg["reasoning_content"] = earlier + "\n\n" + r if earlier else r
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
