"""``orchestrator connect CLIENT``: print a client's settings for this endpoint, or write them."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console


def run(
    client: str, config: Path | None, *, model: str | None, write: bool, show_key: bool, max_output: int | None = None
) -> int:
    """Print ``client``'s settings (the running ``up``'s address when there is one); with ``write``
    update the client's config files after a backup. The key is printed only with ``show_key``.
    Without ``config`` (or with one not on disk), a running ``up``'s models.yaml serves, else
    ``./models.yaml``: an agent is pointed at what actually serves."""
    from orchestrator.config.load import load_config
    from orchestrator.connect.clients import client_config
    from orchestrator.connect.clients import write as write_config
    from orchestrator.connect.endpoint import endpoint_of
    from orchestrator.host import statefile

    live = statefile.read_live()
    running = Path(str(live["config"])) if live is not None and live.get("config") else None
    if running is not None and running.is_file() and (config is None or not config.exists()):
        config = running  # the models.yaml the running up serves (its port may be one the OS picked)
    config = config if config is not None else Path("models.yaml")
    same = live is not None and Path(str(live.get("config", ""))) == config.resolve()
    ep = endpoint_of(load_config(config), live if same else None)
    settings = client_config(client, ep, model, show_key, max_output)
    out = Console(highlight=False, soft_wrap=True)
    for line in settings.lines:
        out.print(line, markup=False)
    if write:
        for path, saved in write_config(settings):
            out.print(f"wrote {path}" + (f" (the previous file is {saved})" if saved else " (new file)"), markup=False)
    return 0
