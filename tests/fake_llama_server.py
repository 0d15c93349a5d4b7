"""A fault-injecting stand-in for llama-server, for supervisor tests only.

It imitates just what the supervisor reads: it binds ``--host``/``--port`` (0 = OS-picked) before
"loading", answers ``/health`` 503 while loading (``/v1/models`` already 200, as in case S01 of
tests/data/supervisor_events.md),
then 200 ``{"status": "ok"}``, reports ``--alias`` in ``/props``, and logs
``listening on http://HOST:PORT`` once loaded, like the real server. Faults:

  --load-seconds S    stay loading for S seconds (a negative value: forever)
  --ready-file PATH   stay loading until PATH exists (the test decides when the load ends)
  --props-alias NAME  report another model in /props (identity mismatch, S02)
  --exit-code N       print an error and exit with N before binding (crash loop)
  --exit-after S      bind, load (and log) for S seconds, then print a CUDA out-of-memory
                      error and exit with --exit-code (default 1): a slow load failure
  --quiet             log nothing while loading (so the load timeout is not extended)
  --dots              while loading, print only dots with no newline (llama.cpp's tensor
                      loading progress), so no complete log line arrives until the load ends
  --slots-status N    answer /slots with this status (401: as with --api-key; 501: --no-slots)
  --spec-batch-failures N   once ready, log llama-server's "failed to process speculative
                      batch" N times, only while launched with --spec-type
  --livelock N        the first N chat requests (POST /v1/chat/completions) of this process take
                      slot 0 and never progress: /slots shows it busy with the request's
                      X-Request-Id and counters that never move (the main loop still answers);
                      each ends when its client disconnects. Later ones are answered at once.

Every other llama-server flag is accepted and ignored.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--alias", default="fake")
    ap.add_argument("--props-alias", default=None)
    ap.add_argument("--load-seconds", type=float, default=0.5)
    ap.add_argument("--ready-file", default=None)
    ap.add_argument("--exit-code", type=int, default=None)
    ap.add_argument("--exit-after", type=float, default=None)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--dots", action="store_true")
    ap.add_argument("--spec-type", default=None)
    ap.add_argument("--spec-batch-failures", type=int, default=0)
    ap.add_argument("--slots-status", type=int, default=200)
    ap.add_argument("--livelock", type=int, default=0)
    args, _unknown = ap.parse_known_args()

    print("fake llama-server: starting", flush=True)
    if args.exit_code is not None and args.exit_after is None:
        print("llama_model_load: error loading model: fake failure", flush=True)
        return args.exit_code

    ready = threading.Event()
    alias = args.props_alias or args.alias
    lock = threading.Lock()
    stuck: dict[str, int] = {}  # X-Request-Id -> task id of a request that never progresses
    counts = {"chats": 0, "tasks": 100}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _json(self, code: int, doc: object) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": alias}]})
            elif not ready.is_set():
                self._json(503, {"error": {"message": "Loading model", "code": 503}})
            elif self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/slots":
                with lock:
                    busy = [
                        {"id": 0, "is_processing": True, "id_task": task, "n_prompt_tokens_processed": 0,
                         "params": {"id_request": rid}, "next_token": [{"n_decoded": 0}]}
                        for rid, task in list(stuck.items())[:1]
                    ]  # fmt: skip
                self._json(args.slots_status, busy or [{"id": 0, "is_processing": False}])
            elif self.path == "/props":
                self._json(200, {"model_alias": alias, "model_path": "/nowhere/" + alias + ".gguf"})
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/chat/completions":
                self._json(404, {"error": {"message": "not found"}})
                return
            with lock:
                counts["chats"] += 1
                counts["tasks"] += 1
                hang = counts["chats"] <= args.livelock
                rid = self.headers.get("X-Request-Id") or f"anonymous-{counts['tasks']}"
                if hang:
                    stuck[rid] = counts["tasks"]
            if hang:
                try:  # a livelocked task: nothing comes until the client goes away
                    while self.connection.recv(1, socket.MSG_PEEK):
                        time.sleep(0.05)
                except OSError:
                    pass
                finally:
                    with lock:
                        stuck.pop(rid, None)
                return
            message = {"role": "assistant", "content": "ok"}
            self._json(200, {"id": "chatcmpl-fake", "object": "chat.completion", "model": alias,
                             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})  # fmt: skip

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    started = time.monotonic()
    while (
        (args.ready_file is not None and not os.path.exists(args.ready_file))
        or (args.ready_file is None and args.load_seconds < 0)
        or (args.ready_file is None and time.monotonic() - started < args.load_seconds)
    ):
        if args.dots:
            print(".", end="", flush=True)
        elif not args.quiet:
            print("llama_model_loader: loading ...", flush=True)
        time.sleep(0.2)
        if args.exit_after is not None and time.monotonic() - started >= args.exit_after:
            print(
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 0: "
                "cudaMalloc failed: out of memory",
                flush=True,
            )
            print("llama_model_load: error loading model: unable to allocate CUDA0 buffer", flush=True)
            return args.exit_code if args.exit_code is not None else 1
    ready.set()
    if args.dots:
        print(" done", flush=True)
    print(f"main: server is listening on http://{args.host}:{server.server_address[1]}", flush=True)
    if args.spec_type:
        for _ in range(args.spec_batch_failures):
            time.sleep(0.2)
            print("srv  update_slots: failed to process speculative batch", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
