"""Reasoning effort onto the levels the model's chat template accepts.

Pure functions, no I/O. llama-server copies a request's ``reasoning_effort`` (chat; Responses'
``reasoning.effort`` becomes it in ``server-chat.cpp``) verbatim into the template variable
``reasoning_effort`` (``oaicompat_chat_params_parse``, tools/server/server-common.cpp), as it does a
``chat_template_kwargs.reasoning_effort``. Some templates check it against their own vocabulary
(Qwen3.8-style: ``low``, ``medium``, ``xhigh``) and ``raise_exception`` for anything else, which
llama-server answers with a template error: clients that send OpenAI's ``high`` or their menu's
``max`` could not talk to the model at all.

The levels a template accepts are learned from the running server once per replica
(``orchestrator.serve.upstream.template_efforts``: each of :data:`LEVELS` rendered through its
``/apply-template``); a client's level then goes to the nearest accepted level on the scale
:data:`LEVELS` (``minimal`` < ``low`` < ``medium`` < ``high`` < ``xhigh`` < ``max``). On a tie
the higher level wins: the client asked for at least that much thinking (``high`` -> ``xhigh``
when ``medium`` and ``xhigh`` are accepted). ``none`` is never mapped: llama-server turns it into
thinking off and removes the variable. Counted as the repair :data:`KIND`.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import ApiError

#: the effort scale, lowest first (``none`` is thinking off, not a level)
LEVELS = ("minimal", "low", "medium", "high", "xhigh", "max")
KIND = "reasoning_effort_mapped"


def nearest(level: str, accepted: tuple[str, ...]) -> str:
    """The accepted level nearest to ``level`` on :data:`LEVELS` (a tie goes up); ``level`` itself
    when accepted, unknown to the scale, or when nothing on the scale is accepted."""
    ranked = [LEVELS.index(a) for a in accepted if a in LEVELS]
    if level in accepted or level not in LEVELS or not ranked:
        return level
    want = LEVELS.index(level)
    return LEVELS[min(ranked, key=lambda r: (abs(r - want), -r))]


def map_body(body: dict[str, Any], accepted: tuple[str, ...] | None) -> dict[str, Any] | None:
    """``body`` (llama-server's chat, Responses or Messages request) with every effort it carries
    (``reasoning_effort``, ``reasoning.effort``, ``chat_template_kwargs.reasoning_effort``) on the
    ``accepted`` levels, or None when nothing changes (``accepted`` None: any level goes).

    Raises:
        ApiError: 400 naming the client's field for a value off the scale (only
            ``chat_template_kwargs`` can carry one: the other two are checked on arrival) that the
            template does not accept either.
    """
    if not accepted:
        return None
    new: dict[str, Any] = {}
    reasoning, ctk = body.get("reasoning"), body.get("chat_template_kwargs")
    top = _fit("reasoning_effort", body.get("reasoning_effort"), accepted)
    if top is not None:
        new["reasoning_effort"] = top
    if isinstance(reasoning, dict):
        effort = _fit("reasoning.effort", reasoning.get("effort"), accepted)
        if effort is not None:
            new["reasoning"] = {**reasoning, "effort": effort}
    if isinstance(ctk, dict):
        kwarg = _fit("chat_template_kwargs", ctk.get("reasoning_effort"), accepted)
        if kwarg is not None:
            new["chat_template_kwargs"] = {**ctk, "reasoning_effort": kwarg}
    return {**body, **new} if new else None


def _fit(field: str, value: Any, accepted: tuple[str, ...]) -> str | None:
    """The accepted level for ``value``, or None when it stays as it is."""
    if not isinstance(value, str) or value == "none" or value in accepted:
        return None
    if value not in LEVELS:
        levels = ", ".join(accepted)
        raise ApiError(400, f"{field}: reasoning effort {value!r} is not one this model's chat template accepts "
                       f"({levels}, or none for no thinking)", param=field)  # fmt: skip
    return nearest(value, accepted)


def effort_field(body: dict[str, Any]) -> str | None:
    """The field that carries an effort level in ``body`` (thinking off is none), or None."""
    ctk = body.get("chat_template_kwargs")
    reasoning = body.get("reasoning")
    for field, value in (
        ("reasoning_effort", body.get("reasoning_effort")),
        ("reasoning.effort", reasoning.get("effort") if isinstance(reasoning, dict) else None),
        ("chat_template_kwargs", ctk.get("reasoning_effort") if isinstance(ctk, dict) else None),
    ):
        if isinstance(value, str) and value != "none":
            return field
    return None
