"""serve: the one OpenAI-compatible endpoint in front of the supervised llama-servers.

Owns everything between a client's HTTP request and an instance's answer: the routes, API keys,
routing by model to a serving replica, request repair before the chat template sees a body,
the upstream HTTP clients, streaming, response repair, and the Prometheus metrics. It reads the
instance table from :mod:`orchestrator.supervise` and never starts or stops a process itself,
except that ``run.py`` wires the supervisor and uvicorn together for ``orchestrator up``.
fastapi, starlette and uvicorn are imported here and nowhere else (but ``cli/``).

Concern -> file:

- the app, its routes and the one error handler: ``app.py``; read-only routes
  (``/v1/models``, ``/health``, ``/status``, ``/metrics``): ``info.py``
- the POST hot path (chat, completions, embeddings as raw ASGI endpoints): ``forward.py``;
  reading and parsing a body under the size limit: ``body.py``
- API keys: ``auth.py``; model name or alias -> model -> replica, hold or 503: ``routing.py``
- request repair for the Qwen3.5 template (pure): ``request_repair.py``; the per-request draft
  length fields (pure): ``speculative_fields.py``
- HTTP to the instances (pooling, the one retry, timeouts, error mapping): ``upstream.py``,
  over the asyncio network backend in ``transport.py``
- relaying server-sent events: ``streaming.py``
- response repair, reasoning vs content (pure): ``response_repair.py`` for whole responses,
  ``stream_repair.py`` for streams
- Prometheus metrics: ``metrics.py``
- ``orchestrator up``'s runtime (supervise, serve, publish ``run.json``, drain, shut down): ``run.py``
"""
