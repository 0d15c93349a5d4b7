"""The per-request draft length K.

==============  =====================================================================
module          what
==============  =====================================================================
``fields.py``   ``speculative.n_max`` as clients send it, flattened (pure)
``classes.py``  the request class statistics are kept under (pure)
``policy.py``   online statistics and the choice, as functions on values (pure)
``tuner.py``    the policy on the request path: per model, metrics, ``/status`` rows
==============  =====================================================================
"""
