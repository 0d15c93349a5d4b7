"""What an Anthropic Messages body may hold (checked by ``http.shapes.check``), from Anthropic's API
reference."""

from __future__ import annotations

from orchestrator.serve.http.shapes import BOOL, INT, NULL, OBJ, STR, arr, obj

_SOURCE = obj(type=STR, media_type=STR, data=STR, url=STR)
_INNER = obj(type=STR, text=STR, source=_SOURCE)
_BLOCK = obj(
    type=STR,
    text=STR,
    source=_SOURCE,
    id=STR,
    name=STR,
    input=OBJ,
    tool_use_id=STR,
    content=STR | arr(_INNER, "content_parts") | OBJ,  # an object: a replayed tool_search_tool_result's
    is_error=BOOL,
    thinking=STR,
    signature=STR,
    data=STR,
)
MESSAGES = obj(
    model=STR | NULL,
    messages=arr(obj(role=STR, content=STR | arr(_BLOCK, "content_parts")), "messages"),
    system=STR | arr(obj(type=STR, text=STR), "content_parts"),
    tools=arr(obj(name=STR, type=STR, description=STR, input_schema=OBJ), "tools"),
    tool_choice=obj(type=STR, name=STR),
    stop_sequences=arr(STR),
    thinking=obj(type=STR, budget_tokens=INT),
    stream=BOOL | NULL,
)
