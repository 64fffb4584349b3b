"""A tiny threaded HTTP server: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process serves requests. ``/readyz`` answers 200
only when every readiness check passes, else 503 with one reason per line. Binds to
``metrics.listen`` (default 127.0.0.1:9464); port 0 picks a free port (tests).
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from cachesync.schema.errors import ConfigError

log = logging.getLogger(__name__)

Check = Callable[[], "str | None"]   # returns why the process is not ready, or None
ACCEPT_WAIT_S = 1.0


ROLE_PORTS = {"consume": 9464, "tail": 9465, "relay": 9466, "monitor": 9467}


def parse_listen(listen: str, role: str) -> tuple[str, int] | None:
    """``"127.0.0.1:9464"`` -> ``("127.0.0.1", 9464)``; ``"auto"`` -> the role's port on
    127.0.0.1; ``"off"`` -> None. Raises ConfigError naming the field."""
    if listen == "off":
        return None
    if listen == "auto":
        return "127.0.0.1", ROLE_PORTS.get(role, 0)
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"metrics.listen: expected host:port (port 0 = any free port), "
                          f"got {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class OpsServer:
    """Serves one registry and a list of readiness checks on a daemon thread.

    The thread sleeps until a connection comes or ``close`` wakes it (socketserver's
    ``serve_forever`` wakes every half second to look for a shutdown request, with
    nothing to serve)."""

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, checks: list[Check]):
        """Binds at once; raises ConfigError when the address is taken or invalid."""
        self.registry, self.checks = registry, checks
        try:
            self._server = ThreadingHTTPServer(address, _handler(self))
        except OSError as e:
            raise ConfigError(f"metrics.listen: cannot listen on {address[0]}:{address[1]}: "
                              f"{e.strerror}; set CACHESYNC_METRICS_LISTEN to another host:port "
                              "(port 0 = any free port) or to off") from None
        self._server.daemon_threads = True
        # handle_request's own wait for the connection the selector saw: bounded, should it
        # have gone meanwhile
        self._server.timeout = ACCEPT_WAIT_S
        self._wake, self._woken = socket.socketpair()
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name="cachesync-http", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> "OpsServer":
        self._thread.start()
        log.info("metrics and health on http://%s (/metrics /healthz /readyz)", self.address)
        return self

    def problems(self) -> list[str]:
        out = []
        for check in self.checks:
            try:
                problem = check()
            except Exception as e:   # noqa: BLE001 - a failing check means "not ready"
                problem = f"readiness check failed: {e}"
            if problem:
                out.append(problem)
        return out

    def _serve(self) -> None:
        """Accept and handle connections until ``close``."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._woken, selectors.EVENT_READ)
            while not self._closing:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._server in ready and not self._closing:
                    self._server.handle_request()   # a connection waits: accepted at once

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._wake.send(b"x")
        if self._thread.is_alive():
            self._thread.join()
        self._server.server_close()
        self._wake.close()
        self._woken.close()


def _handler(ops: OpsServer):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):   # noqa: N802 - http.server's naming
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(ops.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n")
            elif path == "/readyz":
                problems = ops.problems()
                body = ("\n".join(problems) if problems else "ready") + "\n"
                self._send(503 if problems else 200, body.encode())
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

        def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):   # scrapes every few seconds: not worth a log line
            log.debug("http %s", fmt % args)
    return Handler
