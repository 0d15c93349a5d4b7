"""The Ollama API: ``/api/chat``, ``/api/generate``, ``/api/embed`` and its listings.

================  ===================================================================
module            what
================  ===================================================================
``adapter.py``    the adapters: Ollama bodies onto OpenAI routes, NDJSON streams back
``translate.py``  the translations both ways (pure)
``listings.py``   ``GET /api/tags``, ``/api/ps``, ``/api/version``, ``POST /api/show``
``shapes.py``     what an Ollama body may hold
================  ===================================================================
"""
