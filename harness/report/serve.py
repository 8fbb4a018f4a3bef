"""`harness view --serve`: the same pages, rendered on every request from what is on disk now (so a
reload shows a live session's new steps), on 127.0.0.1 only. Every response carries the pages'
Content-Security-Policy; nothing but the report and the task-run pages is served."""

from __future__ import annotations

import getpass
import hmac
import json
import re
import secrets
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness.batch.records import BatchDir
from harness.report import pages
from harness.report.html import HEADER_CSP, esc, page
from harness.report.marks import set_mark

HOST = "127.0.0.1"
_PAGE = re.compile(rf"^/{pages.PAGES}/(?P<id>[A-Za-z0-9_-]{{1,120}})\.html$")


def marks_endpoint(target: Path) -> Callable[[dict[str, Any]], dict[str, str]]:
    """What POST /marks does for a served batch: set a task-run's mark (ValueError: refused)."""
    records = BatchDir(target)

    def mark(body: dict[str, Any]) -> dict[str, str]:
        session, kind = str(body.get("session", "")), str(body.get("mark", ""))
        if session not in {record.session_id for record in records.records()}:
            raise ValueError(f"no task-run {session[:80]!r} in this batch")
        set_mark(target, session, kind, by=getpass.getuser())
        return {"session": session, "mark": kind}

    return mark


def routes(target: Path, *, batch: bool) -> Callable[[str], str | None]:
    """The page of a request path (None: no such page) for a batch directory or one session folder."""
    if not batch:
        return lambda path: pages.session_page(target) if path in ("/", "/index.html") else None
    records = BatchDir(target)

    def route(path: str) -> str | None:
        if path in ("/", f"/{pages.REPORT}"):
            return pages.batch_report([target], page_dir=target)
        found = _PAGE.match(path)
        if found is None:
            return None
        for record in records.records():
            folder = pages.session_dir(records, record)
            if record.key.session_id == found["id"] and folder is not None:
                return pages.session_page(folder, back=f"../{pages.REPORT}")
        return None

    return route


class Server:
    """A threaded HTTP server on 127.0.0.1 serving route(path)."""

    def __init__(
        self,
        route: Callable[[str], str | None],
        port: int = 0,
        marks: Callable[[dict[str, Any]], dict[str, str]] | None = None,
    ) -> None:
        self._route = route
        self.token = secrets.token_urlsafe(24)
        """What the served pages send with a mark (a page of another origin cannot: no CORS here)."""
        handler = _handler(route, marks, self.token)
        self._httpd = ThreadingHTTPServer((HOST, port), handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._httpd.server_address[1]}/"

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.2)

    def start(self) -> Server:
        """Serve on a background thread (tests, embedding)."""
        self._thread = threading.Thread(target=self.serve_forever, name="harness-view", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()


def _handler(
    route: Callable[[str], str | None], marks: Callable[[dict[str, Any]], dict[str, str]] | None, token: str
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if marks is None or self.path != "/marks":
                self._send(HTTPStatus.NOT_FOUND, _error(f"no page {self.path}"))
                return
            length = int(self.headers.get("Content-Length") or 0)
            if (
                not hmac.compare_digest(self.headers.get("X-Harness-Token", ""), token)
                or not self.headers.get("Content-Type", "").startswith("application/json")
                or length > 4096
            ):
                self._send(HTTPStatus.FORBIDDEN, _error("marks come from the served page only"))
                return
            try:
                saved = marks(json.loads(self.rfile.read(length) or b"{}"))
            except (ValueError, TypeError) as error:
                self._send(HTTPStatus.BAD_REQUEST, _error(str(error)))
                return
            self._send(HTTPStatus.OK, json.dumps(saved), "application/json")

        server_version = "harness-view"
        sys_version = ""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].split("#", 1)[0]
            try:
                body = route(path)
            except Exception as error:  # noqa: BLE001 - a damaged session is a page saying so, not a dead server
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR, _error(f"{type(error).__name__}: {error}"))
                return
            if body is None:
                self._send(HTTPStatus.NOT_FOUND, _error(f"no page {path}"))
            else:
                if marks is not None:  # the served report may set marks
                    body = body.replace("<body>", f'<body data-marks-token="{token}">', 1)
                self._send(HTTPStatus.OK, body)

        def _send(self, status: HTTPStatus, body: str, kind: str = "text/html") -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Content-Security-Policy", HEADER_CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return  # quiet: the CLI prints the URL, not every request

    return Handler


def _error(message: str) -> str:
    return page("harness view", f'<p class="bad">{esc(message.splitlines()[0] if message else "error")}</p>')
