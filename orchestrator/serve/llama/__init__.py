"""llama-server's own routes (infill, rerank, tokenize, detokenize, apply-template), forwarded in
OpenAI's error shape.

==============  =====================================================================
module          what
==============  =====================================================================
``adapter.py``  the adapters
``shapes.py``   what each route's body may hold
==============  =====================================================================
"""
