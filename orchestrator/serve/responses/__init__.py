"""OpenAI Responses: ``POST /v1/responses`` and ``/v1/responses/input_tokens``.

================  ===================================================================
module            what
================  ===================================================================
``adapter.py``    the adapters: repair in, per-request tool map and stream fix out,
                  ``response.failed`` endings
``repair.py``     request repair for the Qwen template (pure)
``items.py``      replayed ``input`` items (reasoning, calls, outputs) made readable (pure)
``tools.py``      non-function tools (namespaces, hosted tools) mapped or skipped (pure)
``chat_view.py``  the chat request llama-server makes of a repaired body (pure)
``shapes.py``     what a Responses body may hold
================  ===================================================================
"""
