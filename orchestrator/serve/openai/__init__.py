"""OpenAI chat completions, completions and embeddings: routes llama-server serves itself.

==============  =====================================================================
module          what
==============  =====================================================================
``adapter.py``  the adapters (``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``
                and ``/v1/chat/completions/input_tokens``): repair in, reasoning split out
``shapes.py``   what a chat or completions body may hold (``http.shapes`` checks it)
==============  =====================================================================

Chat is also the internal request every other API becomes, so its repair lives in
``orchestrator.serve.repair.chat``, shared by all of them.
"""
