"""Prompt caches and prefix affinity: which replica and slot hold a request's prefix, and the
caches kept across stops.

===================  ================================================================
module               what
===================  ================================================================
``prompt_cache.py``  the lifecycle hooks, ``id_slot`` affinity, the ``kv`` status block
``prefix.py``        prompts as tokens in-process (warm prefixes, a chat request's prompt)
``chat_view.py``     a chat request as the template sees it (tool-call arguments parsed)
``sessions.py``      prompt-cache hits per client session (``/status``, the console)
===================  ================================================================

Which routes are rendered here, and how their body becomes a chat request, is the route
adapter's ``chat_request`` (the API folders): nothing here names an API.
"""
