"""Keep prompt caches across unloads and restarts: save slots before a stop, restore (verified) and
warm them before a model serves again.

``KvPersistence.save`` runs before every stop the orchestrator controls (idle unload, eviction,
reload, ``down``): each slot of each serving replica is saved with llama-server's
``POST /slots/{id}?action=save`` into the model's folder (``orchestrator.paths.kv_dir``) and
sealed by ``KvStore.commit`` (mode 0600, SHA-256 sidecar); then the disk budget is enforced.

``KvPersistence.restore`` runs after the replicas answer ``/health`` and before the model is
marked ready. Per slot ``s`` of replica ``r``:

- slot ``s < len(warm_prefixes)`` is that warm prefix's: its saved file is restored when it
  holds exactly the prefix's tokens, else the prefix is prefilled (``n_predict`` 0);
- any other slot gets its saved file back when one exists for the same ``layout_key`` (another
  model, build or KV-shaping flag never matches); a file that fails its checks
  (``KvStore.check``: sidecar, size, SHA-256, header) is skipped with a warning and deleted.

A restore is verified: the saved tokens plus one more are sent to that slot, and the answer's
``timings.cache_n`` must cover every saved token (llama.cpp #26676: some builds restore nothing
and say nothing). The probe token is then undone by restoring the file again: a hybrid model's
recurrent state cannot drop a token (server-context.cpp forces full reprocessing instead). A
restore that does not verify is logged, its file dropped, the slot erased, and persistence is
turned off for that model for the rest of the run, with a warning in ``status``.

At the pin (measured by tests/supervise/test_kv_persist.py on the tiny ``qwen35moe`` model, 3 gated
delta-net layers beside 1 attention layer), the saved state carries the recurrent state too:
after a restore the greedy continuation and its log-probabilities equal those of the
uninterrupted server. Hence ``kv_persist`` defaults to true. What a hybrid model can reuse is
narrower than an attention-only one: only a prompt that *extends* the saved tokens (no context
checkpoints are saved), which is what warm prefixes and continued conversations are.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.supervise.affinity import SlotHoldings
from orchestrator.supervise.kv_files import CorruptState, KvStore, layout_key, slot_filename
from orchestrator.supervise.slot_client import SlotClient, SlotError
from orchestrator.supervise.states import SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig
    from orchestrator.supervise.instance import Instance

log = logging.getLogger("orchestrator.kv")

#: ``warm_tokens(model)``: the token lists of the model's warm prefixes (blocking: renders and
#: tokenizes with the GGUF's template and vocabulary; serve supplies it, through request repair).
WarmTokens = Callable[["ModelConfig"], list[list[int]]]


@dataclass
class ModelKv:
    """Persistence state and counters of one model (for ``status`` and metrics)."""

    enabled: bool
    warning: str | None = None
    saved: int = 0  # slot files written
    restored: int = 0  # slot files restored and verified
    warmed: int = 0  # warm prefixes prefilled
    skipped: int = 0  # files refused: corrupt, truncated, unreadable
    verify_failures: int = 0
    restore_seconds: float = 0.0  # total, of verified restores
    last_restore_s: float | None = None
    warm_seconds: float = 0.0  # total prefill time of warm prefixes

    def row(self) -> dict[str, Any]:
        """JSON-serialisable: the ``kv`` block of the model's ``status`` row."""
        return dict(vars(self))


class KvPersistence:
    """Saves and restores the prompt caches of the models it is given (``kv_persist: true``).

    Args:
        store: the folders and the disk budget.
        models: the models.yaml entries (their ``kv_persist`` and ``warm_prefixes``).
        warm_tokens: computes a model's warm prefixes as tokens (None: warm prefixes unused).
        client: the slot HTTP client (one is made when None).
    """

    def __init__(
        self,
        store: KvStore,
        models: Iterable[ModelConfig],
        *,
        warm_tokens: WarmTokens | None = None,
        client: SlotClient | None = None,
    ) -> None:
        self.store = store
        self.state = {m.name: ModelKv(enabled=m.kv_persist) for m in models}
        self.holdings = SlotHoldings()
        self._warm_tokens = warm_tokens
        self._client = client or SlotClient()

    def model(self, name: str) -> ModelKv:
        """The state of model ``name`` (created enabled for a model added by a reload)."""
        return self.state.setdefault(name, ModelKv(enabled=True))

    # ----------------------------------------------------------------- save

    async def save(self, model: ModelConfig, instances: list[Instance], reason: str) -> None:
        """Save every slot holding a prompt of each serving replica of ``model``. Never raises:
        a failure is logged and kept as the model's warning (the stop goes on)."""
        st = self.model(model.name)
        if not (model.kv_persist and st.enabled):
            return
        for inst in instances:
            if inst.state not in SERVING or inst.base_url is None:
                continue
            try:
                await self._save_instance(model.name, inst, st)
            except (SlotError, OSError) as err:
                self._warn(st, model.name, f"saving {inst.name}'s slots before {reason} failed: {err}", disable=False)
        dropped = await asyncio.to_thread(self.store.enforce_budget)
        if dropped:
            log.info("kv: disk budget: deleted %d least recently used slot files", len(dropped))
        self._show_warning(st, instances)

    async def _save_instance(self, model: str, inst: Instance, st: ModelKv) -> None:
        assert inst.base_url is not None
        key = await asyncio.to_thread(layout_key, inst.spec)
        folder = await asyncio.to_thread(self.store.model_dir, model)
        for slot in await self._client.slots(inst.base_url):
            sid = int(slot.get("id", -1))
            if sid < 0:
                continue
            name = slot_filename(key, inst.spec.replica, sid)
            path = folder / name
            self.store.drop(path)
            answer = await self._client.action(inst.base_url, sid, "save", name)
            n_saved = int(answer.get("n_saved", 0))
            if n_saved <= 0:
                self.store.drop(path)  # an empty slot: nothing worth keeping
                continue
            await asyncio.to_thread(self.store.commit, path, key, n_saved)
            st.saved += 1
            log.info("kv: saved %s slot %d (%d tokens, %s bytes)", inst.name, sid, n_saved, answer.get("n_written"))

    # ----------------------------------------------------------------- restore and warm

    async def restore(self, model: ModelConfig, instances: list[Instance]) -> None:
        """Restore (verified) and warm the slots of every serving replica of ``model`` (see the
        module). Never raises: problems become warnings and counters."""
        st = self.model(model.name)
        warm: list[list[int]] = []
        if model.warm_prefixes and self._warm_tokens is not None:
            try:
                warm = await asyncio.to_thread(self._warm_tokens, model)
            except Exception as err:  # a template or file problem must not stop the load
                self._warn(st, model.name, f"warm prefixes not used: {err}", disable=False)
        if len(warm) > min((i.spec.server.parallel for i in instances), default=len(warm)):
            self._warn(
                st, model.name, f"{len(warm)} warm prefixes but fewer slots (parallel): the last unused", disable=False
            )
        persist = model.kv_persist and st.enabled
        if persist:
            await asyncio.to_thread(self.store.drop_unsealed, model.name)
        for inst in instances:
            self.holdings.clear(inst.name)
            if inst.state not in SERVING or inst.base_url is None:
                continue
            try:
                await self._restore_instance(model, inst, st, warm, persist=persist)
            except (SlotError, OSError) as err:
                self._warn(st, model.name, f"restoring {inst.name}'s slots failed: {err}", disable=False)
        self._show_warning(st, instances)

    @staticmethod
    def _show_warning(st: ModelKv, instances: list[Instance]) -> None:
        """Put the model's persistence warning among its replicas' warnings (``status``, console)."""
        if st.warning is not None:
            for inst in instances:
                inst.record_error("kv_persist", st.warning)

    async def _restore_instance(
        self, model: ModelConfig, inst: Instance, st: ModelKv, warm: list[list[int]], *, persist: bool
    ) -> None:
        key = await asyncio.to_thread(layout_key, inst.spec) if persist else ""
        for sid in range(inst.spec.server.parallel):
            prefix = warm[sid] if sid < len(warm) else None
            tokens = await self._restore_slot(model.name, inst, sid, key, st, want=prefix) if persist else None
            if tokens is None and prefix is not None:
                await self._prefill(model.name, inst, sid, prefix, st)
            persist = persist and st.enabled

    async def _restore_slot(
        self, model: str, inst: Instance, sid: int, key: str, st: ModelKv, want: list[int] | None
    ) -> tuple[int, ...] | None:
        """Restore one slot's file when it exists and passes its checks (and, for a warm slot,
        holds exactly ``want``); returns the restored tokens or None."""
        assert inst.base_url is not None
        name = slot_filename(key, inst.spec.replica, sid)
        path = self.store.model_dir(model) / name
        if not path.exists():
            return None
        try:
            tokens = await asyncio.to_thread(self.store.check, path, key)
        except CorruptState as err:
            st.skipped += 1
            self.store.drop(path)
            self._warn(st, model, f"skipped a saved slot file: {err}", disable=False)
            return None
        if not tokens or (want is not None and list(tokens) != want):
            return None
        started = time.monotonic()
        try:
            await self._client.action(inst.base_url, sid, "restore", name)
        except SlotError as err:
            st.skipped += 1
            self.store.drop(path)
            self._warn(st, model, f"llama-server refused saved slot {name}: {err}", disable=False)
            return None
        seconds = time.monotonic() - started
        problem = await self._verify(inst.base_url, sid, tokens, name)
        if problem is not None:
            st.verify_failures += 1
            self.store.drop(path)
            await self._erase(inst.base_url, sid)
            self._warn(st, model, f"kv_persist turned off: the restore of {name} did not verify ({problem})")
            return None
        st.restored += 1
        st.restore_seconds += seconds
        st.last_restore_s = seconds
        self.store.touch(path)
        self.holdings.set(inst.name, sid, tokens)
        log.info("kv: restored %s slot %d (%d tokens) in %.3f s", inst.name, sid, len(tokens), seconds)
        return tokens

    async def _verify(self, url: str, sid: int, tokens: tuple[int, ...], name: str) -> str | None:
        """None when a request extending ``tokens`` by one finds them all cached, else why not."""
        try:
            answer = await self._client.fill(url, sid, [*tokens, tokens[-1]])
            cached = int(answer.get("timings", {}).get("cache_n", -1))
            if cached < len(tokens):
                return f"the next request found {cached} of {len(tokens)} saved tokens cached"
            await self._client.action(url, sid, "restore", name)  # undo the probe token
        except (SlotError, ValueError, TypeError) as err:
            return str(err)
        return None

    async def _prefill(self, model: str, inst: Instance, sid: int, prefix: list[int], st: ModelKv) -> None:
        assert inst.base_url is not None
        if len(prefix) >= inst.spec.server.ctx_size // inst.spec.server.parallel:
            self._warn(st, model, f"warm prefix {sid} ({len(prefix)} tokens) does not fit a slot", disable=False)
            return
        started = time.monotonic()
        await self._client.fill(inst.base_url, sid, prefix)
        st.warmed += 1
        st.warm_seconds += time.monotonic() - started
        self.holdings.set(inst.name, sid, tuple(prefix))
        log.info("kv: warmed %s slot %d with a %d-token prefix", inst.name, sid, len(prefix))

    async def _erase(self, url: str, sid: int) -> None:
        try:
            await self._client.action(url, sid, "erase")
        except SlotError as err:
            log.warning("kv: erasing slot %d at %s failed: %s", sid, url, err)

    def _warn(self, st: ModelKv, model: str, text: str, *, disable: bool = True) -> None:
        log.warning("kv: %s: %s", model, text)
        st.warning = text
        if disable:
            st.enabled = False
