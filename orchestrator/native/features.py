"""What our patch queue adds to llama-server, and what serving without each patch costs: the
features a llama-server lacks when it was not built from ``native/patches`` (a user's own
llama.cpp adopted with ``build.llama_server``, or ``orchestrator build --no-patches``).

A patch is known by a word in its file name, so renumbering the queue changes nothing here; a
patch this table does not know is reported by its name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    """A feature one patch adds: ``word`` appears in the patch's file name."""

    word: str
    name: str
    cost: str


FEATURES: tuple[Feature, ...] = (
    Feature(
        "keepalive",
        "keep-alive after streamed answers",
        "llama-server closes the connection after every stream, so the proxy's pooled connection is lost "
        "and the next request to that replica opens a new one (the proxy retries a request whose pooled "
        "connection died before any byte)",
    ),
    Feature(
        "draft-length",
        "per-request draft length (speculative.n_max / n_min)",
        "requests cannot change K or turn drafting off: every request drafts with the launch K, and a "
        "request for token probabilities gets them with drafting on (they can differ from drafting off)",
    ),
    Feature(
        "slot-save-checkpoints",
        "context checkpoints in saved slots",
        "a restored slot of a hybrid model serves only a prompt that extends every saved token: after an "
        "unload, down + up or crash restart, the next chat turn processes its whole prompt again",
    ),
    Feature(
        "checkpoint-before-generation",
        "a context checkpoint before the generation prompt",
        "a hybrid model's next chat turn, which re-renders a generation prompt of more than 4 tokens, rolls "
        "back 516 tokens or to the last user message instead of 16",
    ),
    Feature(
        "anthropic",
        "llama.cpp's own fields and timings on /v1/messages",
        "llama-server's Anthropic conversion drops the draft length per request and the slot the proxy "
        "picks, and its answers carry no timings: Claude Code's requests draft at the launch K, lose slot "
        "affinity, and are missing from the decode and acceptance figures and the adaptive policy",
    ),
    Feature(
        "result-wait-deadline",
        "abandoned requests stop while other slots work",
        "a request whose client disconnected keeps its slot until it finishes whenever another slot is "
        "busy (llama-server notices the disconnect only when its result wait times out), and a silent "
        "stream's keepalive ping is starved the same way",
    ),
    Feature(
        "prefill-continued",
        "an assistant prefill continued, not repeated",
        "a request that ends with the assistant's own text (a prefill) gets that text again at the start "
        "of the answer, so a client that appends the answer to its prefill has it twice",
    ),
    Feature(
        "slot-switch",
        "a slot saved in the prompt cache before another conversation cuts it off",
        "conversations sharing a system prompt on one slot cut off each other's history at every switch "
        "(llama-server saves the slot only when over half of it would go): each turn re-processes its own "
        "history since the system prompt",
    ),
    Feature(
        "request-id",
        "request ids in /slots (the no-progress watch and resending requests a slot never took)",
        "a slot without progress is found only for a request pinned to it (else the child is restarted), and a "
        "whole (non-streamed) request queued in a child that froze or died is resent only within 5 s of sending "
        "it (past that, the client gets 502 upstream_died and retries)",
    ),
    Feature(
        "render-tools",
        "render_tools: the prompt's tools apart from the offered tools",
        "a tool added or removed in the middle of a conversation (Claude Code's tool_addition / "
        "tool_removal) rewrites the prompt's tools block, so the whole cached conversation is processed again",
    ),
    Feature(
        "responses-whole-answer-timings",
        "timings on whole /v1/responses answers",
        "a non-streamed Responses request's answer carries no timings: it is missing from the decode and "
        "acceptance figures and the adaptive draft-length policy never learns from it",
    ),
    Feature(
        "checkpoint",
        "slot checkpoints",
        "what the checkpoint patch keeps of a hybrid model's slot is not kept: more of a long prompt is "
        "processed again after a slot is reused or restored",
    ),
)


@dataclass(frozen=True)
class FeatureOff:
    """A feature of ``patch`` this llama-server lacks, and what that costs."""

    patch: str
    name: str
    cost: str

    def line(self) -> str:
        return f"{self.name} off (needs {self.patch}): {self.cost}"


def features_off(queue: list[str], applied: frozenset[str]) -> list[FeatureOff]:
    """The features of the patches in ``queue`` (file names, in order) that are not in ``applied``."""
    missing = []
    for patch in queue:
        if patch in applied:
            continue
        known = next((f for f in FEATURES if f.word in patch), None)
        if known is None:
            missing.append(FeatureOff(patch, f"what {patch} adds", "see native/README.md"))
        else:
            missing.append(FeatureOff(patch, known.name, known.cost))
    return missing
