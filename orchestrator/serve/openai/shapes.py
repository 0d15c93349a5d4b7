"""What an OpenAI chat, completions or embeddings body may hold (checked by ``http.shapes.check``),
from OpenAI's API reference. Where the API takes several forms (a string or a list of parts)
every form is allowed."""

from __future__ import annotations

from orchestrator.serve.http.shapes import BOOL, INT, NULL, OBJ, STR, arr, obj

_IMAGE_URL = STR | obj(url=STR, detail=STR)
_OAI_PART = obj(
    type=STR,
    text=STR,
    image_url=_IMAGE_URL,
    input_audio=obj(data=STR, format=STR),
    file=obj(file_data=STR, file_id=STR, filename=STR),
)
_OAI_CALL = obj(id=STR | NULL, type=STR, function=obj(name=STR, arguments=STR | OBJ))
_OAI_MESSAGE = obj(
    role=STR,
    content=STR | NULL | arr(_OAI_PART, "content_parts"),
    name=STR | NULL,
    tool_call_id=STR | NULL,
    tool_calls=NULL | arr(_OAI_CALL),
    reasoning_content=STR | NULL,
    refusal=STR | NULL,
)
_OAI_TOOL = obj(type=STR, function=obj(name=STR, description=STR | NULL, parameters=OBJ | NULL))
STOP = STR | NULL | arr(STR)
_PROMPT_ITEM = STR | INT | OBJ | arr(STR | INT)
PROMPT = STR | OBJ | arr(_PROMPT_ITEM, "content_parts")
CHAT = obj(
    model=STR | NULL,
    messages=arr(_OAI_MESSAGE, "messages"),
    tools=NULL | arr(_OAI_TOOL, "tools"),
    tool_choice=STR | NULL | obj(type=STR, function=obj(name=STR)),
    response_format=NULL | obj(type=STR, json_schema=OBJ, schema=OBJ),
    stop=STOP,
    stream=BOOL | NULL,
    stream_options=NULL | obj(include_usage=BOOL | NULL),
)
COMPLETIONS = obj(model=STR | NULL, prompt=PROMPT, stop=STOP, stream=BOOL | NULL)
EMBEDDINGS = obj(model=STR | NULL, input=PROMPT)
