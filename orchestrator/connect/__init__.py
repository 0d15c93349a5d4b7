"""``orchestrator connect CLIENT``: the settings an agent or app needs for this endpoint (address,
key, model names and aliases, context window), printed, or written into the client's own config
files (a backup first).

Concern -> file:
    the endpoint as clients see it (address, key, models)              endpoint.py
    the clients, printing and writing one's settings                   clients.py
    what a client's settings are made of (lines, file edits)           base.py
    the vendors' agent CLIs: Claude Code, Codex, Qwen Code             vendor.py
    opencode and its fork Kilo                                         opencode.py
    clients of any OpenAI-compatible endpoint: Continue, aider, Open WebUI   apps.py
    the longest answer and the compaction point of a window            limits.py
    Codex's model catalog entry (served on /v1/models)                 catalog.py
    editing a JSON / TOML / YAML config in place, backups              files.py
"""
