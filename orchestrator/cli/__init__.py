"""cli: the ``orchestrator`` command line, and the only place for typer and rich.

Thin: each command parses its options, calls the domain function of the package that owns the
work, and prints. Imports of heavy packages happen inside the command functions so that
``orchestrator --help`` stays instant; this is the one package allowed function-local imports
of the package's own modules. A :class:`~orchestrator.errors.UserError` becomes one line on
stderr and exit status 2. Command modules expose ``run(...) -> int``.

Concern -> file:

- the typer app and every command's options: ``app.py``
- ``orchestrator build`` (build progress bar): ``build.py``
- ``orchestrator inspect`` (facts table, JSON, ``--render``): ``inspect.py``
- ``orchestrator make-tiny-model``: ``make_model.py``
- ``orchestrator bench`` (progress bar, results table, ``--apply`` diff): ``bench.py``
- ``orchestrator up`` (refusals before loading, ``--dry-run``, the live instance table, the ready banner): ``up.py``
- ``orchestrator status``, ``logs``, ``down`` (talk to a running ``up``): ``control.py``
- formatting shared by ``up`` and ``status`` (uptime, state colours): ``format.py``
- ``orchestrator doctor`` (one line per check, with the fix): ``doctor.py``
- ``orchestrator worker`` (the RPC worker, its trust warning, devices and free memory): ``worker.py``
"""
