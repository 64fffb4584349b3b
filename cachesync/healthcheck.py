"""``python -m cachesync.healthcheck [/healthz|/readyz]``: the container image's HEALTHCHECK.

Asks this container's own endpoint: the port of ``CACHESYNC_METRICS_LISTEN`` (``host:port``,
the setting the image's deployments set), on loopback. Exit 0 on HTTP 200, 1 otherwise,
with the reason on stderr. Without the variable (``metrics.listen`` from the config file, or
``auto``) it tries the role ports (consume 9464, tail 9465, relay 9466, monitor 9467): a container
runs one.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

from cachesync.http import ROLE_PORTS

TIMEOUT_S = 4.0
PATHS = ("/healthz", "/readyz")


def ports(listen: str | None) -> list[int]:
    """The ports to ask for ``metrics.listen`` text (None or ``auto``: every role port)."""
    if not listen or listen == "auto":
        return sorted(set(ROLE_PORTS.values()))
    port = listen.rpartition(":")[2]
    return [int(port)] if port.isdigit() and int(port) > 0 else []


def check(path: str, listen: str | None) -> str | None:
    """None when an endpoint answers 200 on ``path``; otherwise why not."""
    problems = []
    for port in ports(listen):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=TIMEOUT_S):
                return None
        except urllib.error.HTTPError as e:
            problems.append(f"127.0.0.1:{port}{path}: HTTP {e.code}")
        except OSError as e:
            problems.append(f"127.0.0.1:{port}{path}: {e}")
    return "; ".join(problems) or f"no port to ask in metrics.listen {listen!r}"


def main(argv: list[str]) -> int:
    path = argv[0] if argv else "/healthz"
    if path not in PATHS:
        print(f"usage: python -m cachesync.healthcheck [{'|'.join(PATHS)}]", file=sys.stderr)
        return 2
    problem = check(path, os.environ.get("CACHESYNC_METRICS_LISTEN"))
    if problem:
        print(f"cachesync healthcheck: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
