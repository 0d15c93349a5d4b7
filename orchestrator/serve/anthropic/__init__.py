"""Anthropic Messages: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

================  ===================================================================
module            what
================  ===================================================================
``adapter.py``    the adapters: repair in, stop reason and message ids fixed out, the
                  stream codec and Anthropic's error shape
``repair.py``     request repair for the Qwen template (pure), errors in Anthropic's shape
``tools.py``      ``tools`` and ``tool_choice`` checked and applied (pure)
``tool_changes``  Claude Code's mid-conversation ``tool_addition`` / ``tool_removal`` (pure)
``tool_search``   Claude Code's tool search: deferred tools and the search server tool (pure)
``chat_view.py``  the chat request llama-server makes of a repaired body (pure), for
                  rendering the prompt in-process (prefix affinity)
``shapes.py``     what a Messages body may hold
================  ===================================================================
"""
