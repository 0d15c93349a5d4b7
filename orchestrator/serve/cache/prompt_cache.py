"""The proxy's side of prompt-cache persistence and prefix affinity.

``PromptCache`` owns the ``KvPersistence`` of one ``orchestrator up`` and joins it to the model
lifecycle: its ``before_stop`` hook saves a model's slots before every stop the orchestrator
controls (idle unload, eviction, reload, shutdown), its ``before_ready`` hook restores
(verified) and warms them before the model is marked ready. Neither hook raises: a persistence
problem is a warning in ``status``, never a model stuck loading. A watch (``watch``, every
``WATCH_TICK`` s) saves a ready model's changed slots once it has been idle ``IDLE_SAVE_S`` s (at
most every ``IDLE_SAVE_EVERY_S`` s: a save blocks the server while it writes), so an unplanned
crash loses at most the turns since; after a crash restart it restores that save. Warm prefixes
are rendered here, through the proxy's own request repair (``orchestrator.serve.cache.prefix``).

Prefix affinity (``route``): for a chat request to a model with several slots or replicas, the
prompt is rendered and tokenized in-process, ``SlotHoldings.choose`` names the replica and
slot holding its longest prefix, the scheduler is asked for that replica, and ``id_slot`` is
added to the body. Metrics: ``orchestrator_kv_*`` (see ``KvCollector``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from orchestrator.errors import ApiError, UserError
from orchestrator.paths import kv_root
from orchestrator.serve.cache.prefix import Launched, prompt_tokens, warm_tokens_for
from orchestrator.serve.cache.sessions import Sessions, opening_digest
from orchestrator.serve.http.body import dump_body
from orchestrator.supervise.affinity import Choice, Replica, SlotHoldings
from orchestrator.supervise.kv_files import KvStore
from orchestrator.supervise.kv_persist import KvPersistence
from orchestrator.supervise.model_state import ModelState
from orchestrator.supervise.slot_client import LIST_TIMEOUT, SlotClient
from orchestrator.supervise.states import SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ModelConfig
    from orchestrator.supervise.instance import Instance
    from orchestrator.supervise.managed import Lease, ManagedModel, Prefer
    from orchestrator.supervise.scheduler import ModelScheduler
    from orchestrator.supervise.supervisor import Supervisor

log = logging.getLogger("orchestrator.kv")
WATCH_TICK = 1.0  # s between looks at the models (idle saves, crash restarts)
IDLE_SAVE_S = 5.0  # s without a request before a ready model's changed slots are saved
IDLE_SAVE_EVERY_S = 60.0  # s at least between two idle saves of one model (bounds their cost)
P = TypeVar("P", bound="Prepared")
# a route adapter's ``chat_request``: its repaired body -> the chat request llama-server renders
ChatOf = Callable[[dict[str, Any]], dict[str, Any]] | None


class Prepared(Protocol):
    """What ``Affinity.bind`` needs of a prepared request: its body and the bytes sent upstream."""

    body: dict[str, Any]
    content: bytes


class Affinity:
    """One chat request routed by prefix: its prompt ``tokens`` and, once a replica is picked,
    the ``choice`` (replica, slot, tokens expected cached)."""

    def __init__(self, holdings: SlotHoldings, tokens: list[int], key: str | None = None) -> None:
        self._holdings = holdings
        self.tokens = tokens  # empty: no affinity (``NO_AFFINITY``)
        self.key = key  # the client's session key, if it sent one
        self.choice: Choice | None = None
        self._busy: tuple[str, int] | None = None

    @property
    def preference(self) -> Prefer | None:
        """``prefer`` for ``ModelScheduler.acquire``, or None without a prompt."""
        return self.prefer if self.tokens else None

    def on(self, lease: Lease, prep: P) -> tuple[Instance, P]:
        """The leased replica and ``prep`` bound to its slot (:meth:`bind`)."""
        return lease.instance, self.bind(prep, lease.instance) if self.tokens else prep

    def prefer(self, serving: list[Instance]) -> Instance | None:
        """The replica among ``serving`` whose slot holds the longest prefix (``ModelScheduler``'s
        ``prefer``), else the least busy; None when ``serving`` is empty."""
        reps = [Replica(i.name, i.spec.server.parallel, i.in_flight) for i in serving]
        self.choice = self._holdings.choose(self.tokens, reps, self.key)
        return next((i for i in serving if self.choice and i.name == self.choice.replica), None)

    def bind(self, prep: P, inst: Instance) -> P:
        """``prep`` with ``id_slot`` naming the chosen slot of ``inst`` (a copy; ``prep`` itself when
        no slot is free there). Marks the slot busy until :meth:`end`."""
        self.end()
        if self.choice is None or self.choice.replica != inst.name:
            self.choice = self._holdings.choose(
                self.tokens, [Replica(inst.name, inst.spec.server.parallel, 0)], self.key
            )
        if self.choice is None or self.choice.slot is None:
            return prep
        self._busy = (inst.name, self.choice.slot)
        self._holdings.begin(inst.name, self.choice.slot, self.tokens, self.key)
        bound = copy.copy(prep)
        bound.body = {**prep.body, "id_slot": self.choice.slot}
        bound.content = _appended(prep.content, b'"id_slot":%d' % self.choice.slot) or dump_body(bound.body)
        return bound

    def __enter__(self) -> Affinity:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.end()

    def end(self) -> None:
        """The request finished (or failed, or moves to another replica): its slot is free."""
        if self._busy is not None:
            self._holdings.end(*self._busy)
            self._busy = None


def _appended(content: bytes, member: bytes) -> bytes | None:
    """``content`` (a JSON object that lacks the member) with ``member`` added before its closing
    brace: the body's own bytes, not re-serialised; None when it is not a non-empty object."""
    end = content.rstrip()
    head = end[:-1].rstrip()
    if not end.endswith(b"}") or head.endswith(b"{"):
        return None
    return head + b"," + member + b"}"


#: A request routed without regard to prefixes (the scheduler's least busy replica, any slot).
NO_AFFINITY = Affinity(SlotHoldings(), [])


class PromptCache:
    """Prompt-cache persistence and affinity for the models of ``config``.

    Args:
        config: the validated models.yaml (``kv_persist``, ``warm_prefixes``, ``parallel``,
            ``server.kv_disk_budget``).
        supervisor: its instances name the GGUF each model runs (for rendering and tokenizing).
        root: the folder of saved slots (default: ``orchestrator.paths.kv_root()``).
    """

    def __init__(self, config: Config, supervisor: Supervisor, root: Path | None = None) -> None:
        self.config = config
        self.supervisor = supervisor
        store = KvStore(root or kv_root(), config.server.kv_disk_budget)
        # a slot list waits as long as the stall watch would for one batch (at least LIST_TIMEOUT)
        lists = SlotClient(list_timeout=max(LIST_TIMEOUT, config.server.timeouts.stall))
        self.kv = KvPersistence(store, config.models, warm_tokens=warm_tokens_for(config, self._gguf), client=lists)
        self._scheduler: ModelScheduler | None = None
        self._watch: asyncio.Task[None] | None = None
        self._idle_saved: dict[str, tuple[float, float]] = {}  # model -> (its last_used then, when)
        self.sessions = Sessions()  # prompt-cache hits per client session (``status``)
        # set by `orchestrator up` on a signal after its stop's saves began: saves still running give
        # way (they may wait on a slow disk or a frozen child; the user asked again to stop now)
        self.hurry = asyncio.Event()

    @classmethod
    def attached(
        cls, config: Config, supervisor: Supervisor, scheduler: ModelScheduler, registry: CollectorRegistry
    ) -> PromptCache:
        """A prompt cache whose hooks run in ``scheduler`` (save before stops, restore and warm
        before ready) and whose metrics are in ``registry``."""
        cache = cls(config, supervisor)
        cache.attach(scheduler)
        registry.register(KvCollector(cache))
        return cache

    def _gguf(self, model: ModelConfig) -> Path:
        """The GGUF ``model`` runs. Raises ``KeyError`` when it has no replica."""
        for inst in self.supervisor.for_model(model.name):
            return inst.spec.gguf
        raise KeyError(model.name)

    def _launched(self, model: ModelConfig) -> Launched:
        """The chat template ``model``'s servers were launched with."""
        server = next(iter(self.supervisor.for_model(model.name))).spec.server
        return Launched(server.chat_template_file, server.template_kwargs)

    def attach(self, scheduler: ModelScheduler) -> None:
        """Register the save and restore hooks with the model lifecycle."""
        scheduler.before_stop.append(self._before_stop)
        scheduler.before_ready.append(self._before_ready)
        self._scheduler = scheduler

    def _follow_config(self) -> None:
        """Take the running config's ``server.kv_disk_budget`` (a reload applies it at the next save)."""
        self.kv.store.budget = self.supervisor.running.current.server.kv_disk_budget

    async def _before_stop(self, m: ManagedModel, reason: str) -> None:
        if reason == "shutdown" and self._watch is not None:
            self._watch.cancel()
        self._follow_config()
        save = asyncio.ensure_future(self.kv.save(m.config, m.instances, reason))
        hurry = asyncio.ensure_future(self.hurry.wait())
        try:
            await asyncio.wait({save, hurry}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hurry.cancel()
            if not save.done():  # a signal to `up` during the saves (or this stop cancelled): stop without it
                save.cancel()
                await asyncio.wait({save})
                log.warning("kv: saving %s's slots before %s skipped", m.name, reason)
        if not save.cancelled() and save.exception() is not None:  # never block a stop
            log.error("kv: saving %s before %s failed", m.name, reason, exc_info=save.exception())
        for inst in m.instances:
            self.kv.holdings.clear(inst.name)

    async def _before_ready(self, m: ManagedModel, _reason: str) -> None:
        if self._watch is None and self._scheduler is not None:
            self._watch = asyncio.get_running_loop().create_task(self.watch(self._scheduler), name="kv watch")
        try:
            await self.kv.restore(m.config, m.instances)
        except Exception as err:  # never leave the model loading: it serves without its cache
            log.exception("kv: restoring %s failed", m.name)
            self.kv.model(m.name).warning = f"restoring saved slots failed: {err}"

    async def watch(self, scheduler: ModelScheduler) -> None:
        """Forever: save idle ready models (bounded, see the module) and restore replicas back
        from a crash. A failure is logged and the watch goes on."""
        while True:
            await asyncio.sleep(WATCH_TICK)
            for m in list(scheduler.models.values()):
                try:
                    await self._look_at(m)
                except Exception:
                    log.exception("kv: watching %s failed", m.name)

    async def _look_at(self, m: ManagedModel) -> None:
        if not m.config.kv_persist or m.state is not ModelState.READY:
            return
        self._follow_config()
        crashed = [i for i in m.instances if i.name in self.kv.restored_pid and i.pid != self.kv.restored_pid[i.name]]
        serving = [i for i in crashed if i.state in SERVING and i.in_flight == 0]
        if serving:
            await self.kv.restore(m.config, serving)
            self.kv.model(m.name).crash_restores += len(serving)
            log.info("kv: restored %s after a restart", ", ".join(i.name for i in serving))
        now = time.monotonic()
        last_used, saved_at = self._idle_saved.get(m.name, (-1.0, -IDLE_SAVE_EVERY_S))
        idle = m.in_flight == 0 and now - m.last_used >= IDLE_SAVE_S
        if idle and m.last_used != last_used and now - saved_at >= IDLE_SAVE_EVERY_S:
            self._idle_saved[m.name] = (m.last_used, now)
            await self.kv.save(m.config, m.instances, "idle")

    async def route(
        self, chat_of: ChatOf, model: ModelConfig, body: dict[str, Any], key: str | None = None
    ) -> Affinity:
        """Prefix affinity for a request whose route renders a chat prompt (``chat_of``: the route
        adapter's ``chat_request``, None for routes without one) without its own ``id_slot``, to a
        model with several slots or replicas (its prompt rendered and tokenized in a thread); a
        client's session ``key`` (its adapter's ``session_key``) keeps a session on its slot. Short
        prompts too: left to llama-server's own choice, a side request (a title, a few dozen tokens)
        takes the slot most like it, often the main conversation's, while another slot is empty.
        ``NO_AFFINITY`` when it does not apply or the body does not render here."""
        replicas = model.replicas if isinstance(model.replicas, int) else len(model.replicas)
        if chat_of is None or "id_slot" in body or (model.parallel == 1 and replicas == 1):
            return NO_AFFINITY
        try:
            gguf, launch = self._gguf(model), self._launched(model)
            tokens, conversation = await asyncio.to_thread(_tokens, gguf, chat_of, body, launch)
        except (ApiError, UserError, KeyError, TypeError, IndexError, ValueError) as err:  # ValueError: no encoding
            log.debug("kv: no prefix affinity for this request: %s", err)
            return NO_AFFINITY
        # one key per conversation of a session: its opening (system prompt, first user message) tells a
        # side request (a title, a summary) and another conversation on the same system prompt from it
        return Affinity(self.kv.holdings, tokens, f"{key or '-'}|{conversation}")

    def status(self, model: str) -> dict[str, Any]:
        """The ``kv`` block of model ``model``'s status row (``ModelKv.row``), with its latest
        sessions' prompt-cache hits (``sessions``)."""
        return {**self.kv.model(model).row(), "sessions": self.sessions.rows(model)}


def _tokens(
    gguf: Path, chat_of: Callable[[dict[str, Any]], dict[str, Any]], body: dict[str, Any], launch: Launched
) -> tuple[list[int], str]:
    """The prompt tokens of ``body`` (already repaired) through its route's chat view (in a thread),
    and a digest of its opening, up to its first user message (which conversation it is)."""
    chat = chat_of(body)
    return prompt_tokens(gguf, chat, launch), opening_digest(chat["messages"])  # system prompt + first user message


class KvCollector(Collector):
    """``orchestrator_kv_*``: saved and restored slots, restore seconds, verification failures,
    skipped files, warm prefixes and whether persistence is on, per model (read at scrape time)."""

    def __init__(self, cache: PromptCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Any]:
        counters = {
            "saved": ("orchestrator_kv_saved_slots", "Slots saved before a stop"),
            "restored": ("orchestrator_kv_restored_slots", "Slots restored and verified before ready"),
            "verify_failures": ("orchestrator_kv_verify_failures", "Restores whose next request found nothing cached"),
            "skipped": ("orchestrator_kv_skipped_files", "Saved slot files refused (corrupt, truncated, refused)"),
            "warmed": ("orchestrator_kv_warmed_prefixes", "Warm prefixes prefilled at load"),
            "restore_seconds": ("orchestrator_kv_restore_seconds", "Seconds spent restoring verified slots"),
        }
        families = {k: CounterMetricFamily(name, text, labels=["model"]) for k, (name, text) in counters.items()}
        enabled = GaugeMetricFamily("orchestrator_kv_persist_enabled", "1 while persistence is on", labels=["model"])
        for name, st in self._cache.kv.state.items():
            row = st.row()
            for key, family in families.items():
                family.add_metric([name], float(row[key]))
            enabled.add_metric([name], 1.0 if st.enabled else 0.0)
        yield from families.values()
        yield enabled
