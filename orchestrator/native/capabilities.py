"""What a built llama-server can do, probed once by running it: flags, draft-mtp, backend.

``probe_capabilities(build)`` runs ``llama-server --help`` (cached per binary: path, mtime,
size) and returns a ``ServerCapabilities`` value. Callers (``orchestrator up``, the bench)
probe once and hand the value to the launch plan, which never runs a process itself.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.native.build import BuildInfo, loader_path, start_failure
from orchestrator.native.features import features_off
from orchestrator.native.fetch import list_patches

_HELP_CACHE: dict[tuple[str, int, int], str] = {}
# a flag at the start of a --help entry, or after a comma: "-md,    --model-draft FNAME"
_FLAG_RE = re.compile(r"(?:^|,)\s*(--?[A-Za-z][\w-]*)", re.MULTILINE)


@dataclass(frozen=True)
class ServerCapabilities:
    """A llama-server binary's abilities.

    Attributes:
        backend: ``"cuda"`` or ``"cpu"``.
        draft_mtp: whether ``--spec-type`` accepts ``draft-mtp`` (MTP speculative decoding).
        flags: every flag spelling ``--help`` lists, e.g. ``"-md"``, ``"--spec-draft-n-max"``.
        patches: the ``native/patches`` files it was built with (``features.features_off`` says
            what a missing one costs).
    """

    backend: str
    draft_mtp: bool
    flags: frozenset[str]
    # the patch files of native/patches this binary was built with (its manifest.json); none for a
    # llama-server we did not build (``build.llama_server``): nothing in --help shows them
    patches: frozenset[str] = frozenset()
    # one line per feature of the current patch queue that it lacks, with the cost (``features_off``)
    features_off: tuple[str, ...] = ()
    missing_patches: frozenset[str] = frozenset()
    help_text: str = ""  # the ``--help`` output the rest was read from: ``default`` reads it

    def default(self, flag: str) -> str | None:
        """llama-server's own default for ``flag`` as its ``--help`` states it ("(default: 2048)"
        -> ``"2048"``); None when the entry states none or the flag is not listed."""
        return help_default(self.help_text, flag)

    def lacks(self, word: str) -> bool:
        """Whether a patch of the queue whose file name holds ``word`` (``draft-length``) is missing."""
        return any(word in name for name in self.missing_patches)

    @classmethod
    def from_help(
        cls, text: str, backend: str, patches: frozenset[str] | None = None, queue: list[str] | None = None
    ) -> ServerCapabilities:
        """Capabilities from ``llama-server --help`` output ``text``; ``patches`` it was built with
        (None: all of ``queue``, the current ``native/patches`` file names)."""
        flags = frozenset(_FLAG_RE.findall(text))
        draft_mtp = "--spec-type" in text and "draft-mtp" in text
        applied = frozenset(queue or []) if patches is None else patches
        off = tuple(f.line() for f in features_off(queue or [], applied))
        missing = frozenset(q for q in queue or [] if q not in applied)
        return cls(
            backend, draft_mtp, flags, patches=applied, features_off=off, missing_patches=missing, help_text=text
        )


# one --help entry: a line starting with a flag at column 0, then its indented continuation lines
_ENTRY_RE = re.compile(r"^--?[A-Za-z].*?(?=^\S|\Z)", re.MULTILINE | re.DOTALL)
_DEFAULT_RE = re.compile(r"\(default: ((?:[^()]|\([^()]*\))*)\)")
_HELP_COLUMN = 40  # common/arg.cpp (common_arg::to_string): the description starts at column 40


def help_default(text: str, flag: str) -> str | None:
    """The "(default: X)" of ``flag``'s entry in llama-server's ``--help`` output ``text``
    (common/arg.cpp prints each option's default there): its value, without the explanation after a
    comma ("8192, -1 - no limit, 0 - disable" -> ``"8192"``); None without one."""
    for entry in _ENTRY_RE.findall(text):
        first = entry.split("\n", 1)[0]
        # flags and value hint, then padding to the description column (or the description on the next line)
        names = first[: _HELP_COLUMN - 3] if first[_HELP_COLUMN - 3 : _HELP_COLUMN] == "   " else first
        if flag in _FLAG_RE.findall(names):
            found = _DEFAULT_RE.search(" ".join(entry.split()))
            return found.group(1).split(", ")[0].strip() if found else None
    return None


def probe_capabilities(build: BuildInfo) -> ServerCapabilities:
    """Run ``build.server --help`` once (cached per binary) and read its capabilities.

    Raises:
        UserError: the binary is missing or cannot run (missing libraries, wrong platform).
    """
    built = (build.manifest or {}).get("patches") or []
    patches = frozenset(str(p.get("name")) for p in built if isinstance(p, dict))
    queue = [p.name for p in list_patches()]
    return ServerCapabilities.from_help(server_help(build), build_backend(build), patches, queue)


def server_help(build: BuildInfo) -> str:
    """``llama-server --help`` text (stdout and stderr), cached per binary (path, mtime, size).

    Raises:
        UserError: the binary is missing or cannot run (missing libraries, wrong platform).
    """
    server = Path(build.server)
    try:
        st = server.stat()
    except OSError as err:
        raise UserError(f"llama-server not found at {server}: {err}", hint="run `orchestrator build`") from None
    key = (str(server), st.st_mtime_ns, st.st_size)
    if key not in _HELP_CACHE:
        _HELP_CACHE[key] = _run_help(build, server)
    return _HELP_CACHE[key]


def _run_help(build: BuildInfo, server: Path) -> str:
    env = {**os.environ, **library_env(build)}
    try:
        out = subprocess.run([str(server), "--help"], capture_output=True, text=True, timeout=60, check=False, env=env)
    except (OSError, subprocess.SubprocessError) as err:
        raise UserError(
            f"cannot run {server} --help: {err}", hint="rebuild with `orchestrator build --force`"
        ) from None
    if out.returncode != 0:
        message, hint = start_failure(server, out.returncode, out.stdout + out.stderr)
        raise UserError(message, hint=hint)
    text = out.stdout + out.stderr
    if (build.manifest or {}).get("adopted") and not all(flag in text for flag in ("--model", "--port")):
        # `up --llama-server` at another program: say so, not "does not support --spec-type draft-mtp"
        raise UserError(
            f"{server} is not a llama-server: its --help lists no --model and --port",
            hint="point build.llama_server (or up --llama-server) at the llama-server binary of your llama.cpp",
        )
    return text


def build_backend(build: BuildInfo) -> str:
    """``"cuda"`` or ``"cpu"``: the manifest's ``backend``, else whether libggml-cuda is present."""
    backend = (build.manifest or {}).get("backend")
    if backend in ("cpu", "cuda"):
        return str(backend)
    return "cuda" if any(Path(build.lib_dir).glob("libggml-cuda.so*")) else "cpu"


def library_env(build: BuildInfo) -> dict[str, str]:
    """``LD_LIBRARY_PATH`` for running the build's llama-server: its library folder first, then
    the runtime folders the build recorded (CUDA runtime, a wheel's cuBLAS), then the current value."""
    extra = [str(d) for d in (build.manifest or {}).get("runtime_lib_dirs") or []]
    return loader_path([str(build.lib_dir), *extra])
