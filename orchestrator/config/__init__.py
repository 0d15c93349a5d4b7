"""models.yaml: its schema, loading it, every problem located at file:line: key, editing it.

Owns the file format and its validation; knows no model file, process or server. ``builtin:``
paths are only names here (the launch layer turns them into files).

Concern -> file:
    pydantic models, JSON schema                   schema.py
    read + validate a file (``load_config``)       load.py
    the running snapshot a reload swaps            running.py
    located problems, ``ConfigError``              problems.py
    file paths: ``~``, relative, split parts       model_paths.py
    flags/env the launch plan owns                 plan_flags.py
    peers, spillover, RPC worker addresses         scaleout.py
    in-place edits keeping comments (bench apply)  yaml_edit.py
"""
