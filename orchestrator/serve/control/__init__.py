"""Model control routes: ``POST /models/load``, ``/models/unload`` (``load.py``) and
``/models/restart`` (``restart.py``)."""
