"""Keep prompt caches across unloads, restarts and crashes: save slots before a stop and when a
model idles, restore (verified) and warm them before a model serves again.

``KvPersistence.save`` runs before every stop the orchestrator controls (idle unload, eviction,
reload, ``down``) and, bounded, when a serving model has been idle a while (``PromptCache``):
each idle slot holding a prompt of each serving replica is saved with llama-server's
``POST /slots/{id}?action=save`` and filed per conversation (``KvStore.adopt``: the longest state
of a conversation wins, so an agent's short title or summary call never replaces its main
context). A busy slot is not waited for (an unload honours ``server.timeouts.drain``), an empty
or unchanged one is not written. Then the disk budget is enforced.

``KvPersistence.restore`` runs after the replicas answer ``/health`` and before the model is
marked ready, and after a crash restart (the last save comes back). Per slot ``s`` of replica ``r``:

- slot ``s < len(warm_prefixes)`` is that warm prefix's: its conversation's file is restored
  when it holds exactly the prefix's tokens, else the prefix is prefilled (``n_predict`` 0);
- the other slots get the model's saved conversations of the same ``layout_key`` (another model,
  build or KV-shaping flag never matches), longest first; a file that fails its checks
  (``KvStore.check``: sidecar, size, SHA-256, header) is skipped with a warning and deleted. A
  file of another slot state version (saved by the llama.cpp of an older pin) is deleted with one
  log line at the restore, whatever its key (``KvStore.drop_outdated``), and never restored.

A restore is verified: the saved tokens plus one more are sent to that slot, and the answer's
``timings.cache_n`` must cover every saved token (llama.cpp #26676: some builds restore nothing
and say nothing). The probe token is then undone by restoring the file again. A slot saved full
(no room for the probe), or one holding an image (its media positions are no tokens a probe
could send), is trusted on ``n_restored``. A restore that does not verify is logged,
its file dropped, the slot erased, and persistence is turned off for that model for the rest of
the run, with a warning in ``status``. A KV folder that cannot be written (read-only, full, not
ours) turns it off too, but not for good: the model loads and serves without persistence, and the
next save or restore at least ``kv_state.RETRY_S`` later tries the folder again (a small write,
and for a full disk more free space than at the fault); once it takes writes, persistence resumes.
``status`` shows when it was last turned off (``turned_off_at``) and when it last resumed
(``resumed_at``), as ``time.time()`` seconds.

With native patch 0003 a saved file carries the slot's context checkpoints and the draft's state:
a hybrid model (gated delta-net layers, whose state cannot roll back) restored from it serves the
next turn of a conversation, which re-renders the previous answer, from the checkpoint at the
end of the previous prompt, exactly as the uninterrupted server does (tests/supervise/test_kv_persist.py,
tests/native/test_patches_slot_checkpoints.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.host import disk
from orchestrator.supervise.affinity import SlotHoldings
from orchestrator.supervise.kv_files import (
    TOKEN_NULL,
    CorruptState,
    KvStore,
    OutdatedState,
    conv_filename,
    layout_key,
    slot_filename,
    state_id,
)
from orchestrator.supervise.kv_state import ModelKv, still_unwritable, write_problem
from orchestrator.supervise.slot_client import SlotClient, SlotError
from orchestrator.supervise.states import SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig
    from orchestrator.supervise.instance import Instance

log = logging.getLogger("orchestrator.kv")

#: ``warm_tokens(model)``: the token lists of the model's warm prefixes (blocking: renders and
#: tokenizes with the GGUF's template and vocabulary; serve supplies it, through request repair).
WarmTokens = Callable[["ModelConfig"], list[list[int]]]
#: llama-server's answer when it cannot write the file (``SERVER_TASK_TYPE_SLOT_SAVE``)
SAVE_REFUSED = "Unable to save slot"


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
        self._locks: dict[str, asyncio.Lock] = {}
        # (instance, slot) -> (pid, id_task) of the state on disk: an unchanged slot is not rewritten
        self._on_disk: dict[tuple[str, int], tuple[int | None, int]] = {}
        self.restored_pid: dict[str, int | None] = {}  # instance -> the child its slots were restored into

    def _slots(self, inst: Instance) -> SlotClient:
        """The slot routes of ``inst``'s child, with its key (supervise/child_auth.py)."""
        return self._client.for_child(inst.lock.auth)

    def model(self, name: str) -> ModelKv:
        """The state of model ``name`` (created enabled for a model added by a reload)."""
        return self.state.setdefault(name, ModelKv(enabled=True))

    def _lock(self, model: str) -> asyncio.Lock:
        return self._locks.setdefault(model, asyncio.Lock())

    # ----------------------------------------------------------------- save

    async def save(self, model: ModelConfig, instances: list[Instance], reason: str) -> None:
        """Save every idle slot holding a changed prompt of each serving replica of ``model``.
        Never raises: a failure is logged and kept as the model's warning (the stop goes on); a
        folder that cannot be written turns persistence off for the model."""
        st = self.model(model.name)
        if not model.kv_persist or not (st.enabled or await self._retry(st, model.name, instances)):
            return
        async with self._lock(model.name):
            for inst in instances:
                if inst.state not in SERVING or inst.base_url is None or not st.enabled:
                    continue
                try:
                    await self._save_instance(model.name, inst, st)
                except OSError as err:
                    self._disk_fault(st, model.name, err)
                except SlotError as err:
                    if SAVE_REFUSED in str(err):  # llama-server could not write the file
                        why = await asyncio.to_thread(write_problem, self.store.root / model.name)
                        self._disk_fault(st, model.name, why)
                    else:
                        self._warn(
                            st, model.name, f"saving {inst.name}'s slots before {reason} failed: {err}", disable=False
                        )
            try:
                dropped = await asyncio.to_thread(self.store.enforce_budget)
            except OSError as err:
                dropped = []
                self._warn(st, model.name, f"disk budget not enforced: {err}", disable=False)
        if dropped:
            log.info("kv: disk budget: deleted %d least recently used slot files", len(dropped))
        self._show_warning(st, instances)

    async def _save_instance(self, model: str, inst: Instance, st: ModelKv) -> None:
        assert inst.base_url is not None
        key = await asyncio.to_thread(layout_key, inst.spec)
        folder = await asyncio.to_thread(self.store.model_dir, model)
        for slot in await self._slots(inst).slots(inst.base_url):
            sid, mark = int(slot.get("id", -1)), _mark(inst, slot)
            if slot.get("is_processing"):
                st.busy_skipped += 1  # not waited for: the drain timeout already passed
                continue
            if sid < 0 or mark is None or self._on_disk.get((inst.name, sid)) == mark:
                continue  # empty, or the state on disk already
            name = slot_filename(key, inst.spec.replica, sid)
            answer = await self._slots(inst).action(inst.base_url, sid, "save", name)
            try:
                kept = await asyncio.to_thread(
                    self.store.adopt, folder / name, key, int(answer.get("n_checkpoints", 0))
                )
            except CorruptState as err:
                self._warn(st, model, f"llama-server wrote an unreadable slot file: {err}", disable=False)
                continue
            self._on_disk[(inst.name, sid)] = mark
            if kept is None:
                st.superseded += 1
                log.info("kv: %s slot %d: a longer state of that conversation is kept", inst.name, sid)
                continue
            st.saved += 1
            log.info("kv: saved %s slot %d (%s tokens, %d bytes)", inst.name, sid, kept.meta["tokens"], kept.size)

    # ----------------------------------------------------------------- restore and warm

    async def restore(self, model: ModelConfig, instances: list[Instance]) -> None:
        """Restore (verified) and warm the slots of every serving replica of ``model`` (see the
        module). Never raises: problems become warnings and counters."""
        st = self.model(model.name)
        warm = await self._warm(model, st, instances)
        persist = model.kv_persist and (st.enabled or await self._retry(st, model.name, instances))
        async with self._lock(model.name):
            if persist:
                try:
                    await asyncio.to_thread(self.store.drop_unsealed, model.name)
                    self._drop_outdated(st, model.name, await asyncio.to_thread(self.store.drop_outdated, model.name))
                except OSError as err:
                    self._disk_fault(st, model.name, err)
                    persist = False
            used: set[str] = set()  # files restored into a slot already (each goes to one slot)
            for inst in instances:
                self.holdings.clear(inst.name)
                if inst.state not in SERVING or inst.base_url is None:
                    continue
                try:
                    await self._restore_instance(model, inst, st, warm, used, persist=persist)
                except (SlotError, OSError) as err:
                    self._warn(st, model.name, f"restoring {inst.name}'s slots failed: {err}", disable=False)
        self._show_warning(st, instances)

    async def _warm(self, model: ModelConfig, st: ModelKv, instances: list[Instance]) -> list[list[int]]:
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
        return warm

    @staticmethod
    def _show_warning(st: ModelKv, instances: list[Instance]) -> None:
        """Put the model's persistence warning among its replicas' warnings (``status``, console)."""
        if st.warning is not None:
            for inst in instances:
                inst.record_error("kv_persist", st.warning)

    async def _restore_instance(
        self, model: ModelConfig, inst: Instance, st: ModelKv, warm: list[list[int]], used: set[str], *, persist: bool
    ) -> None:
        assert inst.base_url is not None
        self.restored_pid[inst.name] = inst.pid
        key = await asyncio.to_thread(layout_key, inst.spec) if persist else ""
        queue = await asyncio.to_thread(self.store.saved, model.name, key) if persist else []
        for sid in range(inst.spec.server.parallel):
            prefix = warm[sid] if sid < len(warm) else None
            tokens = None
            if persist and prefix is not None:
                want = self.store.model_dir(model.name) / conv_filename(key, state_id(prefix))
                tokens = await self._restore_slot(model.name, inst, sid, key, st, want, prefix)
            while persist and prefix is None and tokens is None and queue:
                saved = queue.pop(0)
                if saved.path.name not in used:
                    used.add(saved.path.name)
                    tokens = await self._restore_slot(model.name, inst, sid, key, st, saved.path, None)
            if tokens is None and prefix is not None:
                await self._prefill(model.name, inst, sid, prefix, st)
            persist = persist and st.enabled
        for slot in await self._slots(inst).slots(inst.base_url):  # what is on disk now is in these slots
            if (mark := _mark(inst, slot)) is not None:
                self._on_disk[(inst.name, int(slot.get("id", -1)))] = mark

    async def _restore_slot(
        self, model: str, inst: Instance, sid: int, key: str, st: ModelKv, path: Path, want: list[int] | None
    ) -> tuple[int, ...] | None:
        """Restore the file ``path`` into slot ``sid`` when it passes its checks (and, for a warm
        slot, holds exactly ``want``); returns the restored tokens or None."""
        assert inst.base_url is not None
        if not path.exists():
            return None
        try:
            tokens = await asyncio.to_thread(self.store.check, path, key)
        except OutdatedState as err:  # the sweep at restore missed it (written meanwhile): same outcome
            self.store.drop(path)
            self._drop_outdated(st, model, [(path, err)])
            return None
        except CorruptState as err:
            st.skipped += 1
            self.store.drop(path)
            self._warn(st, model, f"skipped a saved slot file: {err}", disable=False)
            return None
        if not tokens or (want is not None and list(tokens) != want):
            return None
        started = time.monotonic()
        try:
            answer = await self._slots(inst).action(inst.base_url, sid, "restore", path.name)
        except SlotError as err:
            st.skipped += 1
            self.store.drop(path)
            self._warn(st, model, f"llama-server refused saved slot {path.name}: {err}", disable=False)
            return None
        seconds = time.monotonic() - started
        problem = await self._verify(inst, sid, tokens, path.name, answer)
        if problem is not None:
            st.verify_failures += 1
            self.store.drop(path)
            await self._erase(inst.base_url, sid)
            self._warn(st, model, f"kv_persist turned off: the restore of {path.name} did not verify ({problem})")
            return None
        st.restored += 1
        st.checkpoints += int(answer.get("n_checkpoints", 0))
        st.restore_seconds += seconds
        st.last_restore_s = seconds
        self.store.touch(path)
        self.holdings.set(inst.name, sid, tokens)
        log.info("kv: restored %s slot %d (%d tokens) in %.3f s", inst.name, sid, len(tokens), seconds)
        return tokens

    async def _verify(
        self, inst: Instance, sid: int, tokens: tuple[int, ...], name: str, answer: dict[str, Any]
    ) -> str | None:
        """None when a request extending ``tokens`` by one finds them all cached, else why not. A
        slot saved full has no room for that token: its restore answer must count every token."""
        assert inst.base_url is not None
        # llama-server refuses a prompt that fills the slot (no room to generate): a probe of
        # len + 1 tokens needs len + 2 <= n_ctx
        # a slot holding an image cannot be probed by tokens (its media positions are
        # LLAMA_TOKEN_NULL, which /completion refuses): trusted on n_restored, like a full slot
        full = len(tokens) + 2 > inst.spec.server.ctx_size // max(1, inst.spec.server.parallel)
        if full or TOKEN_NULL in tokens:
            restored = int(answer.get("n_restored", -1))
            return None if restored == len(tokens) else f"{restored} of {len(tokens)} tokens restored"
        try:
            probe = await self._slots(inst).fill(inst.base_url, sid, [*tokens, tokens[-1]])
            cached = int(probe.get("timings", {}).get("cache_n", -1))
            if cached < len(tokens):
                return f"the next request found {cached} of {len(tokens)} saved tokens cached"
            await self._slots(inst).action(inst.base_url, sid, "restore", name)  # undo the probe token
        except (SlotError, ValueError, TypeError) as err:
            return str(err)
        return None

    async def _prefill(self, model: str, inst: Instance, sid: int, prefix: list[int], st: ModelKv) -> None:
        assert inst.base_url is not None
        if len(prefix) >= inst.spec.server.ctx_size // inst.spec.server.parallel:
            self._warn(st, model, f"warm prefix {sid} ({len(prefix)} tokens) does not fit a slot", disable=False)
            return
        started = time.monotonic()
        await self._slots(inst).fill(inst.base_url, sid, prefix)
        st.warmed += 1
        st.warm_seconds += time.monotonic() - started
        self.holdings.set(inst.name, sid, tuple(prefix))
        log.info("kv: warmed %s slot %d with a %d-token prefix", inst.name, sid, len(prefix))

    async def _erase(self, url: str, sid: int) -> None:
        try:
            await self._client.action(url, sid, "erase")
        except SlotError as err:
            log.warning("kv: erasing slot %d at %s failed: %s", sid, url, err)

    @staticmethod
    def _drop_outdated(st: ModelKv, model: str, dropped: list[tuple[Path, OutdatedState]]) -> None:
        """Count and log (one line each) files removed for their state version: expected once after
        a pin bump, so a log line, not a warning in ``status``."""
        for path, err in dropped:
            st.outdated += 1
            log.info("kv: %s: removed %s: %s", model, path.name, str(err).partition(": ")[2])

    def _disk_fault(self, st: ModelKv, model: str, err: OSError) -> None:
        """The KV folder cannot be written: persistence off for ``model`` until a later try finds it
        writable (``_retry``), the fault in ``/health``."""
        disk.failed(f"saved prompt caches of {model}", err.filename or self.store.root / model, err)
        self._warn(st, model, f"kv_persist turned off: the KV folder cannot be written ({err})")
        st.disk_fault(self.store.root / model, err)

    async def _retry(self, st: ModelKv, model: str, instances: list[Instance]) -> bool:
        """Whether persistence, turned off by the disk, resumes now (``kv_state``: at most every
        ``RETRY_S``, when the KV folder takes writes again)."""
        if not st.retry_due():
            return False
        folder = self.store.root / model
        problem = await asyncio.to_thread(still_unwritable, folder, st.free_at_fault)
        if problem is not None:
            disk.failed(f"saved prompt caches of {model}", problem.filename or folder, problem)  # counts the try
            log.info("kv: %s: the KV folder still cannot be written (%s); it is tried again later", model, problem)
            return False
        off_since = time.strftime("%H:%M:%S", time.localtime(st.turned_off_at or time.time()))
        st.resume()
        disk.succeeded(f"saved prompt caches of {model}")
        log.warning("kv: %s: kv_persist resumed: the KV folder takes writes again (off since %s)", model, off_since)
        for inst in instances:  # in place of their "turned off" warning
            inst.record_error("kv_persist", f"resumed at {time.strftime('%H:%M:%S')} (off since {off_since})")
        return True

    def _warn(self, st: ModelKv, model: str, text: str, *, disable: bool = True) -> None:
        log.warning("kv: %s: %s", model, text)
        st.warning = text
        if disable:
            st.turn_off()


def _mark(inst: Instance, slot: dict[str, Any]) -> tuple[int | None, int] | None:
    """What identifies the state a ``/slots`` entry holds: the child's pid and the slot's last task;
    None for an empty slot (no task since the start or the last restore, or no tokens)."""
    task = slot.get("id_task")
    if task is None or int(slot.get("n_prompt_tokens", 0) or 0) <= 0:
        return None
    return inst.pid, int(task)
