"""``orchestrator connect CLIENT``: the settings an agent or app needs for this endpoint (address,
key, model names and aliases, context window), printed, or written into the client's own config
file (a backup first).

Concern -> file:
    the endpoint as clients see it (address, key, models)    endpoint.py
    each client's settings and its config file               clients.py
    editing a JSON / TOML / YAML config in place, backups    files.py
"""
