"""The interface every API folder implements: its API's side (``base.py``:
:class:`~orchestrator.serve.adapters.base.Adapter`, the per-request
:class:`~orchestrator.serve.adapters.base.Call` it opens and the internal request) and
llama-server's side (``route.py``: :class:`~orchestrator.serve.adapters.route.Route`, what a route
reads of the request in flight); what a route's checks decide (``plan.py``: ``BodyPlan``, and
``AnswerFix``, what the answer side keeps of it). The request's shared lifecycle is
``orchestrator.serve.pipeline.ProxyRequest``; the adapters are listed in ``orchestrator.serve.registry``.

An adapter turns a request in its API's shape into the internal request (an OpenAI or
llama-server body for one of llama-server's routes), and the upstream answer or events back into
its API's answer, events, usage and error shape. Everything the APIs share (routing, lease,
repair policy, upstream call and resend, timings, metrics, peers, affinity, disconnect, drain)
is the per-request object's, never an adapter's.
"""
