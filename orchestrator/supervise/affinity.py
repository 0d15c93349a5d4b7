"""Prefix affinity: send a request to the slot (and replica) whose cached prompt it continues.

llama-server reuses a slot's cache only for the tokens a new prompt shares with it from the
start; ``id_slot`` in a request picks the slot (tools/server/server-context.cpp,
``get_slot_by_id``). ``SlotHoldings`` remembers, per replica and slot, the prompt tokens the
orchestrator last put there (a routed request, a restored file, a warm prefix); ``choose``
picks for a new prompt:

0. a client session key (Responses ``prompt_cache_key``, Claude Code's session id) goes back to
   the slot its last request used, while that slot is free and the prompt continues what it holds
   (shares at least half of it). A side request of the session (a title or summary request, a
   subagent: another system prompt) goes on below, and the session's own slot counts for it as
   another active conversation's: taken only when no slot is empty;
1. among free slots (no request of ours in flight) of serving replicas, the one whose held
   tokens are all a prefix of the prompt, longest first; then the longest partial match. A
   hybrid model (gated delta-net beside attention) can only reuse a cache the prompt
   *extends*: its recurrent state cannot be rolled back to a shorter prefix, so a slot holding
   exactly the system prompt beats one holding that system prompt plus another conversation;
   A slot whose held tokens the prompt only partly shares (another conversation with the same
   system prompt, a side request) and that another session used within ``ACTIVE_S`` is not
   taken while a slot is empty: that conversation keeps its history;
2. with no match of at least ``MIN_MATCH`` tokens, the least busy replica and its free slot
   that is empty or least recently used;
3. with no free slot at all, no slot is named and llama-server queues the request itself.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

MIN_MATCH = 16  # tokens: a shorter shared start (a chat template's header) is no reason to wait for a slot
MAX_KEYS = 4096  # client session keys remembered (the oldest is forgotten first)
# A slot whose conversation was served this recently is that conversation's: another one that
# shares only its start (a system prompt) takes an empty slot instead of cutting its history off
ACTIVE_S = 600.0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(frozen=True)
class Replica:
    """What ``choose`` needs of one serving replica: its name, slot count and requests in flight."""

    name: str
    slots: int
    load: int


@dataclass(frozen=True)
class Choice:
    """Where a request goes: ``replica`` (name), ``slot`` (None: let llama-server pick) and how
    many prompt tokens the slot is expected to have cached (``matched``)."""

    replica: str
    slot: int | None
    matched: int


class SlotHoldings:
    """Per replica name and slot id: the prompt tokens held, whether a request of ours is in it,
    and when it was last used (monotonic s)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], tuple[int, ...]] = {}
        self._busy: set[tuple[str, int]] = set()
        self._used: dict[tuple[str, int], float] = {}
        self._keyed: dict[str, tuple[str, int]] = {}  # a client's session key -> its slot, oldest first
        self._owner: dict[tuple[str, int], str] = {}  # slot -> the session key of its last request

    def set(self, replica: str, slot: int, tokens: Sequence[int]) -> None:
        """Slot ``slot`` of ``replica`` now holds ``tokens``."""
        self._held[(replica, slot)] = tuple(tokens)
        self._used[(replica, slot)] = time.monotonic()

    def held(self, replica: str, slot: int) -> tuple[int, ...]:
        """The tokens slot ``slot`` of ``replica`` holds (empty when unknown)."""
        return self._held.get((replica, slot), ())

    def clear(self, replica: str) -> None:
        """Forget everything about ``replica`` (it stopped or restarted: its slots are empty)."""
        for key in [k for k in self._held if k[0] == replica]:
            del self._held[key]
        for key in [k for k in self._owner if k[0] == replica]:
            del self._owner[key]
        self._busy = {k for k in self._busy if k[0] != replica}

    def begin(self, replica: str, slot: int, tokens: Sequence[int], key: str | None = None) -> None:
        """A request with prompt ``tokens`` (of the client session ``key``) was sent to the slot."""
        self.set(replica, slot, tokens)
        self._busy.add((replica, slot))
        if key is None:
            self._owner.pop((replica, slot), None)
        else:
            self._owner[(replica, slot)] = key
            self._keyed.pop(key, None)
            self._keyed[key] = (replica, slot)
            if len(self._keyed) > MAX_KEYS:
                del self._keyed[next(iter(self._keyed))]

    def end(self, replica: str, slot: int) -> None:
        """That request finished (or failed)."""
        self._busy.discard((replica, slot))
        self._used[(replica, slot)] = time.monotonic()

    def busy(self, replica: str, slot: int) -> bool:
        return (replica, slot) in self._busy

    def choose(self, prompt: Sequence[int], replicas: Sequence[Replica], key: str | None = None) -> Choice | None:
        """Where ``prompt`` (tokens) should go among ``replicas`` (see the module); None when
        there is no replica. A client session ``key`` (Responses ``prompt_cache_key``, Claude
        Code's session id) goes back to the slot its last request used while that slot is free."""
        if not replicas:
            return None
        sticky = self._keyed.get(key) if key is not None else None
        if sticky is not None and not self.busy(*sticky) and any(r.name == sticky[0] for r in replicas):
            held = self.held(*sticky)
            matched = common_prefix(prompt, held)
            if _continues(matched, held):
                return Choice(sticky[0], sticky[1], matched)
            # the session's side request (a title, a summary, a subagent: another system prompt):
            # it must not cut the session's conversation off its slot while another slot will do
        best: tuple[tuple[bool, int], Replica, int] | None = None
        for rep in replicas:
            for slot in range(rep.slots):
                if self.busy(rep.name, slot):
                    continue
                held = self.held(rep.name, slot)
                matched = common_prefix(prompt, held)
                score = (matched == len(held) and matched > 0, matched)
                if matched >= MIN_MATCH and (best is None or score > best[0]):
                    best = (score, rep, slot)
        if best is not None:
            mine = (best[1].name, best[2]) == sticky
            if not best[0][0] and (mine or self._protected(best[1].name, best[2], key)):
                empty = self._empty(replicas)
                if empty is not None:  # not another active conversation's slot while one is empty
                    return Choice(empty[0], empty[1], 0)
            return Choice(best[1].name, best[2], best[0][1])
        rep = min(replicas, key=lambda r: r.load)
        free = [s for s in range(rep.slots) if not self.busy(rep.name, s)]
        if not free:
            return Choice(rep.name, None, 0)
        slot = min(free, key=lambda s: (len(self.held(rep.name, s)) > 0, self._used.get((rep.name, s), 0.0)))
        return Choice(rep.name, slot, 0)

    def _protected(self, replica: str, slot: int, key: str | None) -> bool:
        """Whether the slot holds another session's conversation that was served within ``ACTIVE_S``."""
        owner = self._owner.get((replica, slot))
        recent = time.monotonic() - self._used.get((replica, slot), 0.0) < ACTIVE_S
        return owner is not None and owner != key and recent

    def _empty(self, replicas: Sequence[Replica]) -> tuple[str, int] | None:
        """A free slot that holds nothing, on the least busy replica that has one, or None."""
        for rep in sorted(replicas, key=lambda r: r.load):
            for slot in range(rep.slots):
                if not self.busy(rep.name, slot) and not self.held(rep.name, slot):
                    return rep.name, slot
        return None


def _continues(matched: int, held: Sequence[int]) -> bool:
    """Whether a prompt sharing ``matched`` tokens with a slot's ``held`` ones is that slot's
    conversation going on: it shares half of them (an edited or re-rendered turn still does), or
    the slot's tokens are unknown (restarted, restored). A side request shares a template header
    or a system prompt's first lines at most."""
    return not held or (matched >= MIN_MATCH and 2 * matched >= len(held))
