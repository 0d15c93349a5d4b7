"""bench: the draft-length sweep behind ``orchestrator bench``.

Owns measuring speculative decoding on a real llama-server: which K values to try and in which
order, launching the bench instances through :mod:`orchestrator.supervise`, sending and timing
the requests, the statistics (acceptance rate, tokens per step, decode tok/s, speedup against
the K = 0 baseline of the same run, step cost), the recommended K, and the results folder.
Nothing here draws on a terminal: :mod:`orchestrator.cli.bench` shows progress and tables.

Concern -> file:

- the steps of a sweep, from options to results and ``--apply``: ``sweep.py``
- option parsing (K and seed lists): ``args.py``; prompt sets and ``--prompts-file``: ``prompts.py``
- variants, request order and the bench copy of an instance spec: ``plan.py``
- running the instances and the request loop: ``runner.py``; one timed request: ``requests.py``
- formulas (pure): ``stats.py``; per-(K, domain) aggregation and the recommendation (pure):
  ``summary.py``
- CSV, JSON, plot and analysis lines: ``report.py``; what the numbers depend on: ``manifest.py``
- ``orchestrator bench agent`` (``scripts/bench_agent.py``): the session scenarios built from recorded
  agent sessions (pure): ``agent_scenarios.py`` over the per-API body edits of ``agent_shapes.py``;
  one streamed request timed (TTFT, longest silence, usage): ``agent_stream.py``; per-turn figures,
  scenario summaries and the before/after table (pure): ``agent_report.py``
"""
