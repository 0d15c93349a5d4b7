"""HTTP to the llama-server replicas and to peers.

=======================  =====================================================================
module                   what
=======================  =====================================================================
``client.py``            one pooled ``aiohttp`` session per upstream, the one retry, timeouts
``errors.py``            what can go wrong there and the error a client gets for it
``peers.py``             models.yaml ``peers:``: peer-only models, spillover, ``GET /peers``
``template_efforts.py``  the reasoning-effort levels a replica's chat template accepts, asked once
=======================  =====================================================================
"""
