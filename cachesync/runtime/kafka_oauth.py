"""OAUTHBEARER tokens for every Kafka client: read from a file, or printed by a command.

kafka-python asks its ``sasl_oauth_token_provider`` for a token at every login, and again
at every re-login the broker asks for before the token's session ends (KIP-368). The file
provider re-reads the file when it changes (a Kubernetes projected token, a sidecar that
renews it); the command provider runs the command again when 80 % of the token's lifetime
has passed. A token is a credential: it is never logged and never in a ``repr``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import shlex
import subprocess
import threading
import time
from typing import Callable

from kafka.errors import SaslAuthenticationFailedError
from kafka.net.sasl import register_sasl_mechanism
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from cachesync.schema.errors import ConfigError

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 30.0
REFRESH_AT = 0.8           # of the token's lifetime, as the Java client's login refresh


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim (Unix seconds) of a JWT, read without checking its signature (the
    broker checks it), or None for a token that is not a JWT or has no ``exp``."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None


def parse_extensions(text: str) -> dict[str, str]:
    """``logicalCluster=lkc-1,identityPoolId=pool-2`` -> the SASL extensions mapping;
    raises ConfigError naming the part that is not ``key=value``."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip().isalnum() or not value.strip() or key.strip() == "auth":
            raise ConfigError(f"kafka.sasl_oauth_extensions: expected key=value pairs "
                              f"(letters and digits for the key, not 'auth'), got {part!r}")
        out[key.strip()] = value.strip()
    return out


class _Provider(AbstractTokenProvider):
    """What both providers share: the SASL extensions, a lock, and no token in a repr or
    a pickle (the tailer's publisher process gets the provider, then reads its own)."""

    def __init__(self, extensions: dict[str, str]) -> None:
        super().__init__()
        self._extensions = dict(extensions)
        self._lock = threading.Lock()
        self._token: str | None = None

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_lock=None, _token=None)
        return self._forget(state)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def _forget(self, state: dict) -> dict:
        return state


class TokenFile(_Provider):
    """The token in ``path``, read again whenever the file changes (size, mtime, inode)."""

    def __init__(self, path: str, extensions: dict[str, str] | None = None) -> None:
        super().__init__(extensions or {})
        self.path = path
        self._seen: tuple | None = None

    def __repr__(self) -> str:
        return f"TokenFile({self.path!r})"

    def token(self) -> str:
        with self._lock:
            try:
                st = os.stat(self.path)
                seen = (st.st_ino, st.st_size, st.st_mtime_ns)
                if seen != self._seen or self._token is None:
                    self._token, self._seen = self._read(), seen
            except OSError as e:
                raise ConfigError(f"kafka.sasl_oauth_token_file: cannot read {self.path}: "
                                  f"{e.strerror}") from None
            return self._token

    def _read(self) -> str:
        with open(self.path, encoding="utf-8") as f:
            text = f.read().strip()
        if not text:
            raise ConfigError(f"kafka.sasl_oauth_token_file: {self.path} is empty")
        return text

    def _forget(self, state: dict) -> dict:
        state["_seen"] = None
        return state


class TokenCommand(_Provider):
    """The token a command prints (the token alone, or JSON with ``access_token`` and
    ``expires_in`` as an OAuth token endpoint answers), run again before it expires.

    When is "before": at 80 % of the lifetime the token's ``exp`` claim (or ``expires_in``)
    gives, and at most ``max_age_s`` after the run. A run that fails while the old token is
    still valid is logged and retried at the next login; one that fails without a valid
    token raises ConfigError with the command's exit status and the end of its stderr.
    """

    def __init__(self, command: str, max_age_s: float, extensions: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(extensions or {})
        self.argv = shlex.split(command)
        if not self.argv:
            raise ConfigError("kafka.sasl_oauth_token_command: empty command")
        self.max_age_s = max_age_s
        self._clock = clock
        self._refresh_at = 0.0
        self._expires_at: float | None = None

    def __repr__(self) -> str:   # the command's arguments may hold a client id: only its name
        return f"TokenCommand({self.argv[0]!r}, ...)"

    def token(self) -> str:
        with self._lock:
            now = self._clock()
            if self._token is None or now >= self._refresh_at:
                self._refresh(now)
            return self._token

    def _refresh(self, now: float) -> None:
        try:
            token, lifetime = self._run()
        except ConfigError as e:
            if self._token is not None and (self._expires_at is None or now < self._expires_at):
                log.warning("%s; the current OAuth token is used until it expires", e)
                return
            raise
        self._token = token
        self._expires_at = None if lifetime is None else now + lifetime
        self._refresh_at = now + min(self.max_age_s, self.max_age_s if lifetime is None
                                     else REFRESH_AT * lifetime)

    def _run(self) -> tuple[str, float | None]:
        """Run the command once: (token, lifetime in seconds or None). It runs in a session
        of its own (a timeout kills everything it started) and without cachesync's own
        CACHESYNC_* variables. Its arguments stay out of every message; the end of its stderr
        is its failure's reason, shown as the AWS SDKs show a ``credential_process``'s (a
        command that traces its requests there, ``curl -v``, shows them to the log)."""
        name = self.argv[0]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CACHESYNC_")}
        try:
            child = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True)
        except OSError as e:
            raise ConfigError(f"kafka.sasl_oauth_token_command: {name} did not run: "
                              f"{e.strerror or type(e).__name__}") from None
        try:
            out, err = child.communicate(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(child.pid, 9)
            except ProcessLookupError:
                pass
            child.communicate()
            raise ConfigError(f"kafka.sasl_oauth_token_command: {name} did not finish within "
                              f"{COMMAND_TIMEOUT_S:g} s") from None
        if child.returncode != 0:
            tail = err.strip()[-300:]
            raise ConfigError(f"kafka.sasl_oauth_token_command: {name} exited with status "
                              f"{child.returncode}" + (f": {tail}" if tail else ""))
        return self._parse(out.strip(), name)

    def _parse(self, out: str, name: str) -> tuple[str, float | None]:
        token, expires_in = out, None
        if out.startswith("{"):
            try:
                answer = json.loads(out)
                token, expires_in = str(answer["access_token"]), answer.get("expires_in")
            except (ValueError, KeyError, TypeError):
                raise ConfigError(f"kafka.sasl_oauth_token_command: {name} printed JSON "
                                  f"without an access_token") from None
        if not token or any(c.isspace() for c in token):
            raise ConfigError(f"kafka.sasl_oauth_token_command: {name} printed no token "
                              f"(expected the token alone on stdout)")
        exp = token_expiry(token)
        if exp is not None:
            return token, max(0.0, exp - self._clock())
        return token, float(expires_in) if isinstance(expires_in, (int, float)) else None

    def _forget(self, state: dict) -> dict:
        state.update(_refresh_at=0.0, _expires_at=None, _clock=time.time)
        return state


class _OAuthLogin(SaslMechanismOAuth):
    """kafka-python's OAUTHBEARER login, which also says when the broker refused the token.

    A broker refusing a token answers with an error challenge (``{"status":
    "invalid_token"}``, RFC 7628); the client acknowledges it (so the broker completes and
    logs the failed login) and the broker closes the connection without an error response.
    kafka-python then sees only a lost connection, as if the broker were down. The ERROR
    line logged here carries the refusal, which cachesync.runtime.kafka_login watches to stop with
    a clear message instead of waiting for a broker that will never accept.
    """

    def receive(self, auth_bytes):
        if auth_bytes:
            log.error("%s", SaslAuthenticationFailedError(
                f"the broker refused the OAuth token: {auth_bytes.decode('utf-8', 'replace')}"))
        super().receive(auth_bytes)


# kafka-python's registry of mechanisms is its extension point; this module is imported
# wherever a token provider exists (unpickling one in the tailer's publisher process too)
register_sasl_mechanism("OAUTHBEARER", _OAuthLogin, overwrite=True)
