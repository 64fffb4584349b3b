"""KEY=VALUE env files (``--env-file``, the devstack's ``.devstack/env``), read with nothing
heavier than the standard library: :mod:`cachesync.prespawn` reads one before the command's
own imports."""

from __future__ import annotations

import os

from cachesync.schema.errors import ConfigError


def read_env_file(path: str | os.PathLike) -> dict[str, str]:
    """Parse KEY=VALUE lines (the devstack's env file); raises ConfigError if unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read env file {path}: {e.strerror}") from None
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def with_env_file(environ: dict[str, str], path: str | os.PathLike | None) -> dict[str, str]:
    """``environ`` with the file's variables added, those already set winning (what
    ``--env-file`` does to the environment); raises ConfigError if unreadable."""
    if path:
        for key, value in read_env_file(path).items():
            environ.setdefault(key, value)
    return environ
