"""The request bounds of models.yaml (``server.request_limits``): how much one request body may hold.

They are checked before anything else reads the body (``orchestrator.serve.http.shapes``): past
one, the client gets 413 naming the key, at once, instead of a llama-server busy for minutes on a
prompt nobody can use (400,000 one-word messages held a core for 600 s). The defaults are far
above what agents send (a long Claude Code or Codex session is a few thousand items).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RequestLimits(BaseModel):
    """Bounds on one request body; past one, 413 ``request_too_large``."""

    model_config = ConfigDict(extra="forbid")

    messages: int = Field(10_000, ge=1, description="messages (Responses: input items) in one request")
    content_parts: int = Field(
        50_000, ge=1, description="content parts (text, images, tool results, token lists) over the whole request"
    )
    text_chars: int = Field(16 * 1024 * 1024, ge=1, description="characters of text in the messages and fields")
    tools: int = Field(512, ge=0, description="tool definitions in one request")
    tool_schema_bytes: int = Field(1024 * 1024, ge=0, description="JSON size of all tool definitions together")


class ServerLimits(BaseModel):
    """The ``server`` block's request bounds (a base of ``ServerConfig``)."""

    request_limits: RequestLimits = Field(default_factory=RequestLimits)
