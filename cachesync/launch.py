"""The ``cachesync`` program's entry point: start what the command will need in a child
process (cachesync.prespawn), then run the command line (cachesync.cli)."""

from __future__ import annotations

import sys

from cachesync import prespawn


def main() -> None:
    prespawn.for_command(sys.argv)
    from cachesync.cli import main as cli
    cli()
