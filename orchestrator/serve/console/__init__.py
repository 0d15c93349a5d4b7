"""The web console: a page at ``/ui/`` that shows and steers the running models.

The page (``static/``: ``index.html``, ``app.js``, ``style.css`` and the vendored uPlot chart
library, see ``static/vendor/README.md``) is shipped inside the package and served from memory;
nothing is built or fetched at run time. It polls small JSON routes; every route is added
after the API's, so the proxy's routes match first and no middleware is added.

=====================================  ======================================================
``GET /``, ``GET /ui``                 redirect to ``/ui/``
``GET /ui/``, ``GET /ui/<file>``       the page and its scripts, styles, library
``GET /ui/api/live?since=SEQ``         instances (``/status`` rows plus resident memory) and
                                       the chart points after ``SEQ`` (``history.History``)
``GET /ui/api/logs/<instance>``        new lines of an instance's log (``?offset=`` bytes)
``GET /ui/api/bench``                  the last ``orchestrator bench`` report, if any
``GET /ui/api/bench/plot``             its ``sweep.png``
=====================================  ======================================================

``routes`` holds ``Console`` (the routes and the sampler task), ``access`` the access rules and
headers, ``history`` the chart samples, ``files`` the log and bench readers.

Model states come from ``GET /v1/models`` and the controls call ``POST /models/load``,
``/models/unload`` and ``/models/restart``, the API the CLI uses. Access rules are in
``access``.
"""
