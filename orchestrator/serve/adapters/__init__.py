"""One adapter per API the proxy speaks; the request itself is ``orchestrator.serve.pipeline.ProxyRequest``.

An adapter turns a request in its API's shape into the internal request (an OpenAI or
llama-server body for one of llama-server's routes), and the upstream answer or events back into
its API's answer, events, usage and error shape. Everything the APIs share (routing, lease,
repair policy, upstream call and resend, timings, metrics, peers, affinity, disconnect, drain)
is the per-request object's, never an adapter's.

==========================  =====================================================================
module                      API
==========================  =====================================================================
``base.py``                 the interface (:class:`~orchestrator.serve.adapters.base.Adapter`),
                            the internal request, the body plan
``openai.py``               OpenAI chat completions, completions, embeddings
``anthropic_messages.py``   Anthropic Messages (and its count_tokens)
``openai_responses.py``     OpenAI Responses (and its input_tokens)
``llama_native.py``         llama-server's own routes (infill, rerank, tokenize, templates)
``ollama_api.py``           Ollama's chat, generate and embed (NDJSON streams)
``registry.py``             every adapter, and which API a path belongs to (error shapes)
==========================  =====================================================================

Adding an API means one module here (its adapter classes, added to ``registry.ADAPTERS``) and
its tests.
"""
