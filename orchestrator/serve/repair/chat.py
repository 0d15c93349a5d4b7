"""Request repair for ``POST /v1/chat/completions``: make client bodies safe for Qwen3.5 templates.

Pure functions, no I/O. The proxy calls :func:`repair_request` on every parsed chat body and
forwards ``result.body`` upstream; when nothing needed repair that is the caller's own dict, so
the proxy can forward the original bytes untouched.

Why this exists: the Qwen3.5 chat template (``models/templates/Qwen3.5-4B.jinja`` in the pinned
llama.cpp) raises on shapes that ordinary OpenAI clients send, and llama-server turns a template
exception into an HTTP 500. The template's exceptions are::

    raise_exception('System message must be at the beginning.')   # any system message not at index 0
    raise_exception('Unexpected message role.')                   # roles outside system/user/assistant/tool
    raise_exception('No user query found in messages.')           # no user message that is not a <tool_response>
    raise_exception('No messages provided.')
    raise_exception('Unexpected item type in content.')           # a content part without text/image/video
    raise_exception('Unexpected content type.')                   # content neither string, list nor null
    raise_exception('System message cannot contain images.')

and its other rules: it trims every content (``render_content(...)|trim``), renders null content as
``''``, joins text parts with no separator (``{{- item.text }}`` per part), and its generation
prompt ends in ``<think>\\n`` unless ``enable_thinking`` is false.

Repairs (each one a *kind* in :attr:`RepairResult.repairs`, for metrics):

==========================  ======================================================================
kind                        what happened
==========================  ======================================================================
``developer_role``          a ``developer`` message (newer OpenAI clients) was treated as ``system``
``system_merged``           two or more system/developer texts became one system message
``system_moved``            a system message that was not at the start moved to index 0
``system_to_user``          (policy ``to_user``) a late system message became a user message
``system_in_place``         (policy ``in_place``, the default) a late system message stayed where it
                            stands, as a ``<system-reminder>`` inside the user turn it follows (or
                            a user turn of its own): ``orchestrator.serve.repair.stability``
``null_content``            null or missing ``content`` became ``""``
``content_parts_joined``    a list of text parts became one string
``empty_dropped``           an empty system message, or an empty assistant message without
                            ``tool_calls`` or reasoning (a turn that only thought is a turn), was dropped
``arguments_empty``         a replayed tool call's empty ``arguments`` became ``{}`` (other
                            arguments that are not a JSON object: 400, ``agent_errors``)
``thinking_moved``          a top-level ``enable_thinking`` (or ``think``) moved into ``chat_template_kwargs``
``thinking_default``        the per-model ``enable_thinking`` default was added
``speculative_flattened``   ``"speculative": {"n_max": K}`` became llama-server's ``"speculative.n_max": K``
``tool_results_ordered``    ``tool`` messages put in the order of their calls by id (``tool_order``)
``tool_choice_named``       an object ``tool_choice`` became ``required`` (or its ``allowed_tools`` mode),
                            ``tools`` cut to its functions (``chat_tool_choice``; llama-server: ``auto``)
==========================  ======================================================================

Everything else (``tool`` messages, ``tool_calls``, ``tool_call_id``, ``name``,
``reasoning_content``, ``tools``, sampling fields) passes through as the same objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.errors import ApiError
from orchestrator.serve.drafting.fields import flat_speculative_fields
from orchestrator.serve.repair import media, tool_order
from orchestrator.serve.repair import tool_choice as chat_tool_choice
from orchestrator.serve.repair.agent_errors import checked_calls
from orchestrator.serve.repair.stability import append_text, reminder
from orchestrator.serve.repair.thinking import chat_thinking, chat_thinking_on

KNOWN_ROLES = ("system", "developer", "user", "assistant", "tool")
SYSTEM_ROLES = ("system", "developer")

# Content-part types that carry media. llama-server's ``oaicompat_content_load_media``
# (tools/server/server-common.cpp) turns these into media markers when an mmproj is loaded and
# refuses them otherwise ("image input is not supported"); every other type but "text" is refused
# ("unsupported content[].type", and ``common_chat_msgs_parse_oaicompat`` in common/chat.cpp).
MEDIA_PART_TYPES = ("image_url", "input_audio", "input_video", "video_url")

# Joiner for text parts. The template renders ``{{- item.text }}`` for each part with nothing in
# between. llama-server hands the list to the template as is: common/jinja/caps.cpp marks this
# template as supporting typed content (it iterates ``for item in content``), so
# ``messages_inp_normalizer`` in common/chat.cpp does not join with "\n" first.
TEXT_PART_JOINER = ""

# Joiner between merged system/developer texts: a blank line (cases file, "policy").
SYSTEM_JOINER = "\n\n"

# Under policy ``to_user`` a late system message becomes a user message starting with this, so the
# model can tell an operator instruction from something the user typed. Plain words, no special
# tokens: the tokenizer must not see a control sequence a client could forge.
SYSTEM_AS_USER_PREFIX = "[System instruction]\n"


@dataclass
class RepairPolicy:
    """Per-model request-repair policy (from models.yaml).

    Attributes:
        system_messages: every policy merges the leading run of system/developer messages into one
            system message at index 0; they differ in the later ones. ``"in_place"`` (default)
            keeps each where it stands, as a ``<system-reminder>`` appended to the user turn it
            follows or as a user turn of its own, so the rendered prompt of a growing conversation
            only grows (cache-stable). ``"merge"`` moves them into the leading system message too.
            ``"to_user"`` turns each into a user message prefixed with :data:`SYSTEM_AS_USER_PREFIX`.
        multimodal: the model has a vision projector (mmproj); media content parts are kept as
            lists for llama-server. When false they are refused with 400.
        fetch_media_urls: llama-server may download ``http(s)`` media URLs (``repair.media``);
            when false such a part is a 400.
        thinking_default: ``enable_thinking`` to send when the client said nothing about thinking
            (no top-level ``enable_thinking``, no ``chat_template_kwargs.enable_thinking``, no
            ``reasoning_effort``); ``None`` leaves the template's default (thinking on).
        client_thinking: a client's default (Anthropic ``thinking.type: adaptive``) may switch
            thinking; when false a configured ``thinking_default`` wins over it.
        stable_system: (models.yaml ``cache.stable_system``) system-prompt lines holding a clock
            move to a note at the end of the prompt (``orchestrator.serve.repair.clock``).
    """

    system_messages: Literal["in_place", "merge", "to_user"] = "in_place"
    multimodal: bool = False
    fetch_media_urls: bool = False
    thinking_default: bool | None = None
    client_thinking: bool = False
    stable_system: bool = False


@dataclass
class RepairResult:
    """What :func:`repair_request` decided.

    Attributes:
        body: the body to send upstream. The caller's own dict (same object) when ``changed`` is
            false; otherwise a new dict sharing every untouched value with the original.
        changed: whether anything was repaired.
        repairs: repair kinds, each at most once, in the order first applied.
        thinking: whether the generation prompt will open a ``<think>`` block, i.e. the template's
            ``enable_thinking`` is not false. Follows ``chat_template_kwargs.enable_thinking`` in the
            repaired body, then ``reasoning_effort == "none"`` (which llama-server maps to
            thinking off), else true (the template's default). Assumes llama-server was launched
            without a server-wide ``--chat-template-kwargs`` default; per-model defaults go through
            :attr:`RepairPolicy.thinking_default` instead.
    """

    body: dict[str, Any]
    changed: bool
    repairs: list[str] = field(default_factory=list)
    thinking: bool = True


class _Kinds:
    """Ordered set of repair kinds."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, kind: str) -> None:
        if kind not in self.items:
            self.items.append(kind)


def _bad(message: str, param: str | None) -> ApiError:
    return ApiError(400, message, param=param)


def _join_parts(parts: list[Any], where: str, role: str, policy: RepairPolicy) -> str | None:
    """Validate a content-part list; return the joined text, or None if it must stay a list.

    Raises ApiError(400) for a part that is not an object, an unknown ``type``, a text part whose
    ``text`` is not a string, a media part for a non-multimodal model, or media in a system
    message (template: ``System message cannot contain images.``).
    """
    texts: list[str] = []
    has_media = False
    for j, part in enumerate(parts):
        here = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise _bad(f"{here} must be an object with a 'type'", here)
        ptype = part.get("type")
        if ptype == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"{here}.text must be a string", f"{here}.text")
            texts.append(text)
        elif ptype in MEDIA_PART_TYPES:
            if role in SYSTEM_ROLES:
                raise _bad(f"{here}: a {role} message cannot contain media ('{ptype}')", f"{here}.type")
            if not policy.multimodal:
                raise _bad(
                    f"{here}: this model does not accept '{ptype}' parts (it has no vision projector); send text only",
                    f"{here}.type",
                )
            if ptype in ("image_url", "video_url"):
                media.check_url(media.part_url(part, ptype), f"{here}.{ptype}.url", policy.fetch_media_urls)
            has_media = True
        else:
            raise _bad(
                f"{here}.type {ptype!r} is not supported; use 'text'"
                + (" or " + ", ".join(MEDIA_PART_TYPES) if policy.multimodal else ""),
                f"{here}.type",
            )
    if has_media:
        return None
    return TEXT_PART_JOINER.join(texts)


def _is_user_query(content: Any) -> bool:
    """Mirror of the template's query scan: a user message counts unless its trimmed text is a
    ``<tool_response>...</tool_response>`` block (``No user query found in messages.``)."""
    if isinstance(content, list):  # kept only when it holds media, which renders vision tokens
        return True
    text = content.strip() if isinstance(content, str) else ""
    return not (text.startswith("<tool_response>") and text.endswith("</tool_response>"))


def _repair_message(i: int, msg: Any, policy: RepairPolicy, kinds: _Kinds) -> dict[str, Any] | None:
    """One message repaired: ``msg`` itself when it needs nothing, a new dict when it was fixed,
    None when it is dropped (empty system, or empty assistant without ``tool_calls``).

    Raises ApiError(400) for a message that is not an object, an unknown role, bad content.
    """
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise _bad(f"{where} must be an object with 'role' and 'content'", where)
    role = msg.get("role")
    if role not in KNOWN_ROLES:
        raise _bad(
            f"{where}.role {role!r} is not supported; use one of {', '.join(KNOWN_ROLES)} "
            "(template: 'Unexpected message role.')",
            f"{where}.role",
        )
    new: dict[str, Any] | None = None  # copy-on-write of msg
    content = msg.get("content")
    if content is None:
        # Template renders null as '' anyway; llama-server rejects a message with neither
        # content nor tool_calls, so a missing content must be filled in.
        new = dict(msg)
        new["content"] = content = ""
        kinds.add("null_content")
    elif isinstance(content, list):
        joined = _join_parts(content, f"{where}.content", role, policy)
        if joined is not None:
            new = dict(msg)
            new["content"] = content = joined
            kinds.add("content_parts_joined")
    elif not isinstance(content, str):
        raise _bad(
            f"{where}.content must be a string, a list of content parts or null "
            f"(got {type(content).__name__}; template: 'Unexpected content type.')",
            f"{where}.content",
        )
    if role == "developer":
        new = dict(new if new is not None else msg)
        new["role"] = role = "system"
        kinds.add("developer_role")
    blank = isinstance(content, str) and not content.strip()
    reasoned = isinstance(msg.get("reasoning_content"), str) and bool(msg["reasoning_content"].strip())
    if blank and (role == "system" or (role == "assistant" and not msg.get("tool_calls") and not reasoned)):
        kinds.add("empty_dropped")
        return None
    calls = checked_calls(msg.get("tool_calls"), f"{where}.tool_calls") if role == "assistant" else None
    if calls is not None:
        new = {**(new if new is not None else msg), "tool_calls": calls}
        kinds.add("arguments_empty")
    return new if new is not None else msg


def _place_system(out: list[dict[str, Any]], policy: RepairPolicy, kinds: _Kinds) -> list[dict[str, Any]] | None:
    """The list with its leading system messages merged into index 0 and the later ones placed by
    the policy (merged too, or turned into user text in place), or None when they already are."""
    sys_at = [k for k, m in enumerate(out) if m["role"] == "system"]
    if not sys_at or sys_at == [0]:
        return None
    lead = [k for n, k in enumerate(sys_at) if k == n] if policy.system_messages != "merge" else sys_at
    if len(lead) > 1:
        kinds.add("system_merged")
    if any(k != n for n, k in enumerate(lead)):
        kinds.add("system_moved")
    rest: list[dict[str, Any]] = []
    for k, m in enumerate(out):
        if m["role"] != "system":
            rest.append(m)
        elif k in lead:
            continue
        elif policy.system_messages == "to_user":
            kinds.add("system_to_user")
            rest.append({"role": "user", "content": SYSTEM_AS_USER_PREFIX + m["content"].strip()})
        else:
            kinds.add("system_in_place")
            _append_reminder(rest, m["content"])
    if lead:
        first = dict(out[lead[0]])
        first["content"] = SYSTEM_JOINER.join(out[k]["content"].strip() for k in lead)
        rest.insert(0, first)
    return rest


def _append_reminder(rest: list[dict[str, Any]], text: str) -> None:
    """A late system text into the user turn it follows, or as a user turn of its own."""
    if rest and rest[-1]["role"] == "user" and isinstance(rest[-1].get("content"), str):
        rest[-1] = {**rest[-1], "content": append_text(rest[-1]["content"], reminder(text))}
    else:
        rest.append({"role": "user", "content": reminder(text)})


def _repair_messages(messages: Any, policy: RepairPolicy, kinds: _Kinds) -> list[dict[str, Any]]:
    """Return the repaired message list: the same list object when nothing changed.

    Raises ApiError(400) as described in :func:`repair_request`.
    """
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list of messages (template: 'No messages provided.')", "messages")
    # First pass: per-message fixes and drops; system texts are stripped later only when merged.
    out: list[dict[str, Any]] = []
    touched = False
    for i, msg in enumerate(messages):
        fixed = _repair_message(i, msg, policy, kinds)
        touched = touched or fixed is not msg
        if fixed is not None:
            out.append(fixed)
    placed = _place_system(out, policy, kinds)
    if placed is not None:
        touched, out = True, placed
    touched = tool_order.order_chat(out, kinds.add) or touched
    if not any(m["role"] == "user" and _is_user_query(m.get("content")) for m in out):
        raise _bad(
            "no user message to answer (empty system/assistant messages are dropped, and a user "
            "message that is only a <tool_response> does not count; template: 'No user query found "
            "in messages.'); add a user message",
            "messages",
        )
    if not touched:
        return messages
    return out


def normalize_messages(messages: Any, policy: RepairPolicy | None = None) -> list[dict[str, Any]]:
    """Return ``messages`` as the template will be given them (used by ``orchestrator inspect --render``).

    Args:
        messages: an OpenAI ``messages`` list.
        policy: the model's policy; defaults to :class:`RepairPolicy()`.

    Returns:
        The repaired list (the same list object when it was already compliant); the input is never
        mutated.

    Raises:
        ApiError: 400 for the faults listed in :func:`repair_request`.
    """
    return _repair_messages(messages, policy or RepairPolicy(), _Kinds())


def repair_request(body: dict[str, Any], policy: RepairPolicy) -> RepairResult:
    """Repair a chat-completions request body so the Qwen3.5 template renders it.

    Args:
        body: the parsed JSON body a client sent to ``POST /v1/chat/completions``. Never mutated.
        policy: the model's :class:`RepairPolicy`.

    Returns:
        A :class:`RepairResult`. ``result.body is body`` and ``changed`` is false when the request
        already satisfies every rule. Otherwise ``body`` is a new dict; repaired messages are new
        dicts, untouched values (``tools``, unchanged messages, ...) are shared, not copied.

    Rules, in the order applied (see the module docstring for the template text each one answers):
        * the leading system and developer messages are merged, in order, into one system message
          at index 0, texts stripped and joined by a blank line; later ones stay in place as
          ``<system-reminder>`` user text (policy ``in_place``), are merged too (``merge``) or
          become prefixed user messages (``to_user``);
        * an empty or whitespace-only system message, and such an assistant message without
          ``tool_calls``, is dropped;
        * null or missing content becomes ``""``; a list of text parts becomes one string joined
          with no separator, exactly as the template renders it;
        * a top-level ``enable_thinking`` moves into ``chat_template_kwargs`` (client's explicit
          ``chat_template_kwargs.enable_thinking`` wins); ``policy.thinking_default`` is added when
          the client said nothing about thinking;
        * ``"speculative": {"n_max": K, "n_min": M}`` becomes ``"speculative.n_max": K,
          "speculative.n_min": M``.

    Raises:
        ApiError: 400 ``invalid_request_error`` with ``param`` naming the field, for: a body that
            is not an object (``param=None``); missing, non-list or empty ``messages``
            (``"messages"``); a message that is not an object (``"messages[i]"``); an unknown role
            (``"messages[i].role"``); content of another type (``"messages[i].content"``); a
            content part of an unknown type, or a media part for a non-multimodal model or in a
            system message (``"messages[i].content[j].type"``); a text part without string text
            (``"messages[i].content[j].text"``); no user query left after repair (``"messages"``);
            a non-boolean ``enable_thinking``; a bad ``speculative`` object or a negative or
            non-integer draft length (``"speculative.n_max"`` etc.).
    """
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", None)
    kinds = _Kinds()
    messages = _repair_messages(body.get("messages"), policy, kinds)
    ctk = chat_thinking(body, policy.thinking_default, kinds.add)
    spec = flat_speculative_fields(body)
    if spec is not None:
        kinds.add("speculative_flattened")
    named = chat_tool_choice.resolve(body, kinds.add)
    if not kinds.items:
        return RepairResult(body=body, changed=False, repairs=[], thinking=chat_thinking_on(body))
    new = dict(body)
    new["messages"] = messages
    if ctk is not None:
        new.pop("enable_thinking", None)
        new.pop("think", None)  # Ollama's spelling on /v1: honoured, not forwarded (llama-server ignores it)
        new["chat_template_kwargs"] = ctk
    if spec is not None:
        del new["speculative"]
        new.update(spec)
    new.update(named)
    return RepairResult(body=new, changed=True, repairs=kinds.items, thinking=chat_thinking_on(new))
