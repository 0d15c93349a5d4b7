"""serve: the one endpoint in front of the supervised llama-servers (OpenAI, Anthropic, Ollama APIs).

Owns everything between a client's HTTP request and a replica's answer. It reads the instance
table from :mod:`orchestrator.supervise` and asks it for loads and restarts, but never touches a
process itself. fastapi, starlette and uvicorn are imported here and nowhere else (but ``cli/``).

The folders say the concerns; imports run down this list (an import-linter contract in
``pyproject.toml`` keeps it so):

=========================  =========================================================================
where                      what
=========================  =========================================================================
``run.py``                 ``orchestrator up``'s runtime: supervise, serve, publish ``run.json``, drain
``app.py``                 the composition root: builds every part once, the route table, one error handler
``registry.py``            every API's adapters and routes; which API a path's errors belong to
``console/``               the web console at ``/ui/``
``control/``               ``POST /models/load``, ``/models/unload``, ``/models/restart``, ``/reload``
``reload.py``              hot reload of models.yaml
``ollama/``, ``llama/``    APIs that translate onto OpenAI's routes: Ollama; llama-server's own routes
``openai/``                OpenAI chat, completions, embeddings
``anthropic/``             Anthropic Messages
``responses/``             OpenAI Responses
``pipeline.py``            :class:`~orchestrator.serve.pipeline.ProxyRequest`: one request, whatever its API
``info.py``                read-only routes: ``/v1/models``, ``/health``, ``/status``, ``/metrics``, ``/peers``
``adapters/``              the interface every API implements (``base.py``: the adapter, its ``Call``; ``plan.py``)
``forward.py``             what every forwarded request shares (``Forwarder``)
``holding.py``             a lease on a replica, held while its model loads
``request_settings.py``    what requests read from the running config, one snapshot per request
``streaming.py``           relaying server-sent events; per-API stream codecs plug in here
``upstream/``              HTTP to replicas and peers, errors there, peers
``metrics.py``             Prometheus metrics
``routing.py``             model name or alias -> model -> replica, hold or 503
``cache/``                 prefix affinity and prompt caches across stops
``http/``                  the edge: limits below the app, API keys, the one body reader, body shapes
``repair/``                request and response repair (pure)
``drafting/``              the per-request draft length
=========================  =========================================================================

An API folder holds its adapters (routes, translation both ways, stream codec, error shape), its
request shapes and its pure translations; the adapter declares what shared code needs of it
(``shape``, ``generates``, ``chat_request``, ``session_key``, ``error_prefix``), so no module outside
the folder names that API's paths or fields. Adding an API is a folder and a line in ``registry.py``.
"""
