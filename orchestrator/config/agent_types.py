"""The coding-agent keys of one model in models.yaml (``ModelConfig`` takes them from ``ModelAgentKeys``):
who decides whether the model thinks, what an answer that only thought becomes, what keeps the
prompt cache stable."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SYSTEM_MESSAGES_ABOUT = (
    "system messages after the conversation started: in_place (user text where they stand, cache-stable), "
    "merge (into the first), to_user (prefixed user turns)"
)


class ModelCacheKeys(BaseModel):
    """``models[].cache``: prompt-cache keys of one model."""

    model_config = ConfigDict(extra="forbid")

    stable_system: bool = Field(
        False,
        description="move system-prompt lines holding a time with seconds (a clock that changes every request) "
        "to a <system-reminder> note at the end of the last user turn, so the cached prefix stays (docs/agents.md)",
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
    on_reasoning_only: Literal["continue", "pass", "retry_without_thinking"] = Field(
        "continue",
        description="an answer that ended inside its thinking (no text, no tool call): continue (once, with the "
        "thinking closed and kept as the answer's start, then the API's incomplete status if still empty), pass "
        "(the incomplete status at once), retry_without_thinking (chat, not streamed: ask again without thinking)",
    )
    cache: ModelCacheKeys = Field(
        default_factory=ModelCacheKeys, description="what keeps this model's prompt cache reusable"
    )
