"""What a body for one of llama-server's own routes may hold (checked by ``http.shapes.check``),
from llama-server's README at the pin."""

from __future__ import annotations

from orchestrator.serve.http.shapes import BOOL, INT, NULL, OBJ, STR, arr, obj
from orchestrator.serve.openai.shapes import PROMPT

INFILL = obj(model=STR | NULL, input_prefix=STR, input_suffix=STR, input_extra=arr(obj(filename=STR, text=STR)))
RERANK = obj(model=STR | NULL, query=STR, documents=arr(STR | OBJ, "content_parts"), top_n=INT | NULL)
TOKENIZE = obj(model=STR | NULL, content=PROMPT, add_special=BOOL, with_pieces=BOOL)
DETOKENIZE = obj(model=STR | NULL, tokens=arr(INT, "content_parts"))
