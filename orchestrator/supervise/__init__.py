"""supervise: run and watch the llama-server children of one ``orchestrator up`` (or bench run).

It owns each child's life: spawn, readiness (``/health``, then ``/props`` identity), watching
(exit, a main loop that answers nothing), restart with backoff or FAILED on a crash loop before
ready, stop without orphans, the child's
log, and the drafting watch that can relaunch an instance without speculation. It knows nothing
of HTTP clients of the proxy or of the CLI; ``serve`` and ``bench`` drive it.

Concern -> file:

- lifecycle table, states and their groups, typed loop outcomes, timing rules: ``states.py``
- state record, its one writer, crash accounting, requests to the loop: ``lifecycle.py``
- consecutive load failures (never ready) -> FAILED, whatever their timing: ``load_failures.py``
- when to restart, after how long, when to give up, which states recover (pure): ``restart_policy.py``
- the unresponsive mark between a silent main loop and the stall verdict: ``responsiveness.py``
- one supervised llama-server and its lifecycle loop: ``instance.py``
- the child's process, log file and tails, ``/health``/``/slots``/``/props`` probes: ``child_io.py``
- speculation statistics (drafting check, acceptance floor, spec-batch failures): ``spec_watch.py``
- the read side: delegated readers ``parts.py``, the ``/status`` row ``status.py``
- reading llama-server's health answers and log lines (pure): ``readiness.py``
- all instances, replica picking, waiting for readiness: ``supervisor.py``
- prompt caches across stops: save before a stop, verified restore and warm prefixes before
  ready: ``kv_persist.py``; a model's persistence state and when a KV folder that failed is tried
  again: ``kv_state.py``; the saved files (format, layout key, 0600, SHA-256, LRU disk
  budget): ``kv_files.py``; llama-server's slot routes: ``slot_client.py``; which slot and
  replica hold a prompt's longest prefix: ``affinity.py``
- a model's RPC workers (models.yaml ``rpc:``): wait for them, notice a lost one: ``rpc_workers.py``
- ``orchestrator worker``: one supervised ``ggml-rpc-server``: ``worker.py``
- the model scheduler, the one writer of the models' state (load on demand, eviction, TTL,
  queueing, reload): its commands and decisions ``scheduler.py``, its timed transitions (load,
  unload, drain) ``transitions.py``, restart and reload ``rollout.py`` (both bases of the
  scheduler's class); its side effects behind ``effects.py`` (the real ones: ``replicas.py``);
  a model's record, held and granted requests, the one replica picker ``managed.py``; its rules
  as functions ``model_rules.py``; the memory budget ``budget.py``; model states and events
  (pure) ``model_state.py``
"""
