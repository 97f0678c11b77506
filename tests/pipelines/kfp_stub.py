"""A local stand-in for the KFP v2beta1 REST API: records every request, answers what kfp.Client needs."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

API = "/apis/v2beta1"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


@dataclass
class KfpStub:
    url: str
    requests: list[Request] = field(default_factory=list)
    experiments: dict[str, str] = field(default_factory=dict)  # display name -> id

    def posted(self, path: str) -> list[Any]:
        return [r.body for r in self.requests if r.method == "POST" and r.path == API + path]


def _handler(stub: KfpStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def _reply(self, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self, method: str) -> Request:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            req = Request(method, url.path, parse_qs(url.query), json.loads(raw) if raw else None)
            stub.requests.append(req)
            return req

        def do_GET(self) -> None:
            req = self._record("GET")
            if req.path == f"{API}/healthz":
                self._reply({"multi_user": False})
            elif req.path == f"{API}/experiments":
                wanted = json.loads(req.query.get("filter", ["{}"])[0]).get("predicates", [{}])[0].get("stringValue")
                found = [{"experiment_id": i, "display_name": n} for n, i in stub.experiments.items() if n == wanted]
                self._reply({"experiments": found, "total_size": len(found)})
            else:
                self._reply({})

        def do_POST(self) -> None:
            req = self._record("POST")
            if req.path == f"{API}/experiments":
                exp_id = f"exp-{len(stub.experiments) + 1}"
                stub.experiments[req.body["display_name"]] = exp_id
                self._reply({"experiment_id": exp_id, "display_name": req.body["display_name"]})
            elif req.path == f"{API}/runs":
                self._reply({"run_id": "run-123", "display_name": req.body.get("display_name")})
            elif req.path == f"{API}/recurringruns":
                self._reply({"recurring_run_id": "rr-7", "display_name": req.body.get("display_name")})
            else:
                self._reply({})

    return Handler


def start_stub() -> tuple[KfpStub, ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), None)  # type: ignore[arg-type]
    stub = KfpStub(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return stub, server
