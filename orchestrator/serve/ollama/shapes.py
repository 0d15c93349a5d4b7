"""What an Ollama body may hold (checked by ``http.shapes.check``), from Ollama's ``api.md``."""

from __future__ import annotations

from orchestrator.serve.http.shapes import BOOL, NULL, OBJ, STR, Shape, arr, obj

_CALL = obj(function=obj(name=STR, arguments=OBJ | STR), id=STR, type=STR)
_MESSAGE = obj(
    role=STR,
    content=STR | NULL,
    images=NULL | arr(STR, "content_parts"),
    tool_calls=NULL | arr(_CALL),
    thinking=STR | NULL,
    tool_name=STR | NULL,
    tool_call_id=STR | NULL,
)
_TOOL = obj(type=STR, function=obj(name=STR, description=STR, parameters=OBJ))
_COMMON = {"model": STR | NULL, "options": NULL | OBJ, "stream": BOOL | NULL, "format": STR | NULL | OBJ}
CHAT = Shape(
    frozenset({"object"}),
    {**_COMMON, "messages": arr(_MESSAGE, "messages"), "tools": NULL | arr(_TOOL, "tools")},
)
GENERATE = Shape(
    frozenset({"object"}),
    {**_COMMON, "prompt": STR | NULL, "system": STR | NULL, "images": NULL | arr(STR, "content_parts")},
)
EMBED = Shape(frozenset({"object"}), {**_COMMON, "input": STR | arr(STR, "content_parts")})
SHOW = obj(model=STR | NULL, name=STR | NULL)
