"""A scripted Onceplan API for unit tests: clients/testdata/cases.json's
server answers, served by http.server on 127.0.0.1:0 in a thread."""

from __future__ import annotations

import json
import os
import re
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CASES_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "cases.json")

_NOW = re.compile(r"^\{\{now([+-]\d+)s\}\}$")
_KEYED = re.compile(r"^/api/v1/effects/([^/?]+)(/settle|/heartbeat)?$")


def load_cases() -> dict[str, Any]:
    with open(CASES_PATH, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("version") != 1:
        raise AssertionError("clients/testdata/cases.json: these tests read version 1 of the table")
    return doc


def fill(v: Any) -> Any:
    """Each "{{now±Ns}}" string replaced by that time, RFC 3339."""
    if isinstance(v, str):
        m = _NOW.match(v)
        if m:
            at = datetime.now(timezone.utc) + timedelta(seconds=int(m.group(1)))
            return at.isoformat().replace("+00:00", "Z")
        return v
    if isinstance(v, dict):
        return {k: fill(e) for k, e in v.items()}
    if isinstance(v, list):
        return [fill(e) for e in v]
    return v


class ScriptedServer:
    """Answers each route with its answers in order (the last again once
    they run out) and records what the client sent."""

    def __init__(self, token: str, answers: dict[str, list[dict[str, Any]]]) -> None:
        self.token = token
        self.answers = answers
        self.lock = threading.Condition()
        self.served: dict[str, int] = {}
        self.routes: list[str] = []
        self.sent: dict[str, list[Any]] = {}
        self.beats = 0
        self.errors: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server._serve(self)

            def do_POST(self) -> None:
                server._serve(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def begin_key(self) -> str:
        for a in self.answers.get("begin", []):
            body = a.get("body")
            if isinstance(body, dict) and isinstance(body.get("key"), str):
                return body["key"]
        return ""

    def wait_beats(self, n: int, timeout: float) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: self.beats >= n, timeout)

    def _fail(self, msg: str) -> None:
        with self.lock:
            self.errors.append(msg)

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        if h.headers.get("Authorization") != "Bearer " + self.token:
            self._fail(f"{h.command} {h.path}: Authorization {h.headers.get('Authorization')!r}, want the bearer token")
        path = h.path.split("?", 1)[0]
        m = _KEYED.match(path)
        key = ""
        if h.command == "POST" and path == "/api/v1/effects":
            route = "begin"
        elif m and h.command == "POST" and m.group(2):
            route, key = m.group(2)[1:], m.group(1)
        elif m and h.command == "GET" and not m.group(2):
            route, key = "get", m.group(1)
        else:
            self._fail(f"unexpected request {h.command} {h.path}")
            self._write(h, 404, {"Content-Type": "text/plain"}, b"no such route")
            return
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        with self.lock:
            if key and key != self.begin_key():
                self.errors.append(f"{route} of key {key!r}, want the begin's key {self.begin_key()!r}")
            if raw:
                try:
                    self.sent.setdefault(route, []).append(json.loads(raw))
                except ValueError:
                    self.errors.append(f"{route}: the body is not JSON: {raw!r}")
            if route != "heartbeat":
                self.routes.append(route)
            answers = self.answers.get(route, [])
            n = self.served.get(route, 0)
            self.served[route] = n + 1
        if not answers:
            self._fail(f"the case scripts no answer to {route}")
            self._write(h, 500, {"Content-Type": "application/json"},
                        json.dumps({"error": {"code": "unscripted", "message": f"the case scripts no answer to {route}"}}).encode())
            return
        a = answers[min(n, len(answers) - 1)]
        if a.get("drop"):
            h.close_connection = True
            return
        headers = dict(a.get("headers") or {})
        if "text" in a:
            headers["Content-Type"] = "text/plain"
            payload = str(a["text"]).encode()
        else:
            headers["Content-Type"] = "application/json"
            payload = json.dumps(fill(a.get("body"))).encode()
        self._write(h, int(a["status"]), headers, payload)
        if route == "heartbeat":
            with self.lock:
                self.beats += 1
                self.lock.notify_all()

    @staticmethod
    def _write(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], payload: bytes) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)
        h.wfile.flush()


def subset(path: str, want: Any, got: Any) -> list[str]:
    """How got differs from want: each of want's keys must be got's (None:
    absent), a string "~x" is contained in got's string."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: got {got!r}, want an object"]
        diffs: list[str] = []
        for k, w in want.items():
            if w is None:
                if got.get(k) is not None:
                    diffs.append(f"{path}.{k}: got {got[k]!r}, want it absent")
                continue
            if k not in got:
                diffs.append(f"{path}.{k}: absent, want {w!r}")
                continue
            diffs.extend(subset(f"{path}.{k}", w, got[k]))
        return diffs
    if isinstance(want, str) and want.startswith("~"):
        if not isinstance(got, str) or want[1:] not in got:
            return [f"{path}: {got!r} does not contain {want[1:]!r}"]
        return []
    if json.dumps(want, sort_keys=True) != json.dumps(got, sort_keys=True):
        return [f"{path}: got {got!r}, want {want!r}"]
    return []
