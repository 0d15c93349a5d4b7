"""The coding-agent keys of one model in models.yaml (``ModelConfig`` takes them from ``ModelAgentKeys``):
who decides whether the model thinks."""

from __future__ import annotations

from pydantic import BaseModel, Field

SYSTEM_MESSAGES_ABOUT = (
    "system messages after the conversation started: in_place (user text where they stand, cache-stable), "
    "merge (into the first), to_user (prefixed user turns)"
)


class ModelAgentKeys(BaseModel):
    """Per-model keys for agent clients."""

    client_thinking: bool = Field(
        False,
        description="let a client's default switch thinking (Anthropic thinking.type adaptive, as Claude Code "
        "sends on every request); false: the model's configured `thinking` wins over it",
    )
    preserve_thinking: bool | None = Field(
        None,
        description="render every earlier turn with its reasoning, so a new user message re-processes only itself "
        "(Qwen3.6's switch; Qwen3.5's template is rewritten to take it); costs the reasoning's context; "
        "null = on where the template allows it; false passes --no-reasoning-preserve (llama-server keeps it "
        "on by default)",
    )
