"""Anthropic Messages: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

================  ===================================================================
module            what
================  ===================================================================
``adapter.py``    the adapters: repair in, stop reason and message ids fixed out, the
                  stream codec and Anthropic's error shape
``repair.py``     request repair for the Qwen template (pure), errors in Anthropic's shape
``chat_view.py``  the chat request llama-server makes of a repaired body (pure), for
                  rendering the prompt in-process (prefix affinity)
``shapes.py``     what a Messages body may hold
================  ===================================================================
"""
