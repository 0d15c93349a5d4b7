"""A small Hugging Face Hub on 127.0.0.1 for the pull tests: the endpoints ``huggingface_hub``
uses, answered from files held in memory.

- ``GET /api/models/{repo}[/revision/{rev}]``: model info; ``?blobs=true`` adds each sibling's
  size, blob id and LFS sha256 (what ``model_info(files_metadata=True)`` reads);
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the file listing with sizes and LFS oids;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: the file, with ``X-Repo-Commit``, ``ETag`` and
  ``X-Linked-Etag`` (the sha256 of LFS files, quoted), ``X-Linked-Size``, ``Accept-Ranges`` and
  ``Range: bytes=N-`` answered with 206 and ``Content-Range``.

Faults: ``stall_after[path] = n`` sends the first ``n`` bytes of the next full GET of ``path``
and then holds the connection until ``release`` is set (an interrupted transfer: the client is
killed meanwhile); ``corrupt.add(path)`` serves bytes that do not match the listed sha256.
Every request is logged as ``(method, path, Range header)``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


@dataclass
class FakeHub:
    """Repositories ``{repo: {path: bytes}}``, one commit each, and the fault switches."""

    repos: dict[str, dict[str, bytes]]
    stall_after: dict[str, int] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def commit(self, repo: str) -> str:
        return hashlib.sha1(repo.encode()).hexdigest()

    @staticmethod
    def sha256(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    def sibling(self, path: str, data: bytes) -> dict[str, object]:
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        lfs = {"size": len(data), "sha256": self.sha256(data), "pointerSize": 134}
        return {"rfilename": path, "size": len(data), "blobId": blob, "lfs": lfs}


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _missing(self, code: str) -> None:
            self._json(404, {"error": code}, {"X-Error-Code": code, "X-Error-Message": code})

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

        def _serve(self, *, head: bool) -> None:
            url = urlsplit(self.path)
            path = unquote(url.path)
            hub.log.append((self.command, path, self.headers.get("Range")))
            if m := _TREE.match(path):
                return self._tree(m["repo"], m["path"] or "")
            if m := _INFO.match(path):
                return self._info(m["repo"], "blobs=true" in (url.query or ""))
            if m := _RESOLVE.match(path):
                return self._file(m["repo"], m["path"], head)
            self._missing("EntryNotFound")

        def _info(self, repo: str, blobs: bool) -> None:
            files = hub.repos.get(repo)
            if files is None:
                return self._missing("RepoNotFound")
            siblings = [hub.sibling(p, d) if blobs else {"rfilename": p} for p, d in sorted(files.items())]
            self._json(
                200,
                {
                    "id": repo,
                    "modelId": repo,
                    "sha": hub.commit(repo),
                    "private": False,
                    "tags": ["gguf"],
                    "siblings": siblings,
                },
            )

        def _tree(self, repo: str, under: str) -> None:
            files = hub.repos.get(repo)
            if files is None:
                return self._missing("RepoNotFound")
            rows = [
                {
                    "type": "file",
                    "path": p,
                    "size": len(d),
                    "oid": hub.sibling(p, d)["blobId"],
                    "lfs": {"oid": hub.sha256(d), "size": len(d), "pointerSize": 134},
                }
                for p, d in sorted(files.items())
                if p.startswith(under)
            ]
            self._json(200, rows)

        def _file(self, repo: str, name: str, head: bool) -> None:
            data = hub.repos.get(repo, {}).get(name)
            if data is None:
                return self._missing("EntryNotFound" if repo in hub.repos else "RepoNotFound")
            etag = f'"{hub.sha256(data)}"'
            if name in hub.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            start = 0
            if rng := re.match(r"bytes=(\d+)-$", self.headers.get("Range") or ""):
                start = int(rng[1])
            body = data[start:]
            self.send_response(206 if start else 200)
            for k, v in {
                "Content-Length": str(len(body)),
                "Accept-Ranges": "bytes",
                "ETag": etag,
                "X-Linked-Etag": etag,
                "X-Linked-Size": str(len(data)),
                "X-Repo-Commit": hub.commit(repo),
                "Content-Type": "application/octet-stream",
            }.items():
                self.send_header(k, v)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if head:
                return
            cut = hub.stall_after.pop(name, None) if start == 0 else None
            if cut is not None:
                self.wfile.write(body[:cut])
                self.wfile.flush()
                hub.release.wait(120)  # the client is interrupted meanwhile
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@contextmanager
def serve_hub(hub: FakeHub) -> Iterator[FakeHub]:
    """Serve ``hub`` on 127.0.0.1 (an OS-picked port) for the body; ``hub.url`` is its address."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        hub.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
