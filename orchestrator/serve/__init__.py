"""serve: the one endpoint in front of the supervised llama-servers (OpenAI, Anthropic, Ollama APIs).

Owns everything between a client's HTTP request and an instance's answer: the routes, API keys,
routing by model to a serving replica, request repair before the chat template sees a body,
the upstream HTTP clients, streaming, response repair, the Prometheus metrics and the web
console. It reads the instance table from :mod:`orchestrator.supervise` and asks the
``Supervisor`` for restarts, but never touches a process itself; ``run.py`` wires the
supervisor and uvicorn together for ``orchestrator up``.
fastapi, starlette and uvicorn are imported here and nowhere else (but ``cli/``).

Concern -> file:

- the app, its routes and the one error handler: ``app.py``; read-only routes
  (``/v1/models``, ``/health``, ``/status``, ``/metrics``): ``info.py``
- one adapter per API (request in its shape -> the internal request; answer, events, usage and
  errors back in its shape): ``adapters/``; the list of forwarded routes: ``adapters/registry.py``
- the hot path: one ``ProxyRequest`` per request owns what every API shares (drain, auth, routing,
  lease, repair, speculation fields, upstream call and resend, timings, metrics, peers, affinity,
  disconnect): ``pipeline.py``; the state requests share (``Forwarder``): ``forward.py``;
  reading, decoding (any text encoding) and parsing a body under the size limit: ``body.py``; ``Content-Encoding``
  (gzip, deflate, zstd) under the same limit (pure): ``body_codec.py``
- limits below the app (header size 431, slow heads 408, malformed HTTP as JSON): ``http_limits.py``
- API keys: ``auth.py`` (loopback and ``Host`` names, pure: ``hosts.py``);
  model name or alias -> model -> replica, hold or 503: ``routing.py``;
  peers (models.yaml ``peers:``), spillover, where requests went, ``GET /peers``: ``peers.py``
- request repair for the Qwen3.5 template (pure): ``request_repair.py`` (OpenAI chat; an object
  ``tool_choice``: ``chat_tool_choice.py``),
  ``anthropic.py`` (Messages), ``responses.py`` (Responses); the per-request draft length fields
  (pure): ``speculative_fields.py``; structured output honoured or refused (pure): ``structured.py``;
  per-token probabilities complete with drafting on (pure): ``token_probs.py``; every field
  llama-server parses checked (types, ranges, sampler chains, tools) and its 500s for client
  mistakes recognised (pure): ``llama_fields.py``
- the Ollama API: translations (pure) ``ollama.py``, its adapter ``adapters/ollama_api.py``, its
  listings (``/api/tags``, ``/api/ps``, ``/api/show``) ``ollama_routes.py``
- HTTP to the instances and peers (aiohttp sessions, pooling, the one retry, timeouts, error
  mapping): ``upstream.py``; what can go wrong there and the error a client gets: ``upstream_errors.py``
- relaying server-sent events (and their per-API shapes): ``streaming.py``
- response repair, reasoning vs content (pure): ``response_repair.py`` for whole responses,
  ``stream_repair.py`` for streams
- Prometheus metrics: ``metrics.py``
- prompt caches across stops and prefix affinity (the lifecycle hooks, ``id_slot``, the ``kv``
  status block and metrics): ``prompt_cache.py``; prompts as tokens in-process (warm prefixes,
  chat prompts): ``prompt_prefix.py``
- ``POST /models/restart`` (drain, stop, start one replica at a time): ``model_control.py``
- the web console at ``/ui/`` (page, JSON routes, chart history, log and bench readers): ``console/``
- ``orchestrator up``'s runtime (supervise, serve, publish ``run.json``, drain, shut down): ``run.py``
"""
