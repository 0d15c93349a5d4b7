"""What a Responses body may hold (checked by ``http.shapes.check``), from OpenAI's API reference."""

from __future__ import annotations

from orchestrator.serve.http.shapes import BOOL, NULL, OBJ, STR, arr, obj

_PART = obj(type=STR, text=STR, image_url=STR | NULL, file_id=STR | NULL, file_data=STR, filename=STR)
_PARTS = STR | NULL | arr(_PART, "content_parts")
_ITEM = obj(
    type=STR,
    role=STR,
    content=_PARTS,
    id=STR | NULL,
    call_id=STR | NULL,  # null on Codex's replayed hosted calls (local_shell_call, tool_search_call)
    name=STR,
    arguments=STR | OBJ,  # an object on a tool_search_call
    output=_PARTS,
    summary=arr(obj(type=STR, text=STR)),
)
RESPONSES = obj(
    model=STR | NULL,
    input=STR | arr(_ITEM, "messages"),
    instructions=STR | NULL,
    tools=NULL | arr(obj(type=STR, name=STR, description=STR | NULL, parameters=OBJ | NULL), "tools"),
    tool_choice=STR | NULL | obj(type=STR, name=STR),
    stream=BOOL | NULL,
)
