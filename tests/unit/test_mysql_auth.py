"""MySQL 8.4's caching_sha2_password: PyMySQL's full authentication works with what the sidecar
installs (MariaDB, the devstack's server, does not have the plugin, so the server side is
scripted here), and the compose MySQL no longer needs mysql_native_password."""

from __future__ import annotations

import importlib.metadata
import pathlib

import yaml
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from pymysql.protocol import MysqlPacket

import cachesync
from cachesync.runtime.library_adapter import (AuthPeer, pymysql_auth,
                                                       pymysql_has_cryptography)

ROOT = pathlib.Path(__file__).resolve().parents[2]
PASSWORD = b"caching-sha2-Pw"
SALT = bytes(range(1, 21))                      # the server's 20-byte nonce
OK = b"\x00\x00\x00\x02\x00\x00\x00"


class ScriptedServer(AuthPeer):
    """The server side of a full caching_sha2 authentication on plain text: fast auth
    misses (the cache is empty), the client asks for the public key, then sends the
    password RSA-encrypted; the server decrypts and checks it."""

    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.password, self.salt, self.server_public_key = PASSWORD, None, None
        self.received: list[bytes] = []
        self._replies: list[bytes] = []

    def write_packet(self, data: bytes) -> None:
        self.received.append(bytes(data))
        if len(self.received) == 1:                         # the fast-auth scramble
            self._replies.append(b"\x01\x04")               # perform full authentication
        elif data == b"\x02":                               # public key request
            pem = self.key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo)
            self._replies.append(b"\x01" + pem)
        else:
            self._replies.append(OK if self._decrypted(data) == PASSWORD + b"\0" else
                                 b"\xff\x15\x04#28000Access denied")

    def _decrypted(self, data: bytes) -> bytes:
        oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(),
                            label=None)
        mixed = self.key.decrypt(data, oaep)
        return bytes(b ^ SALT[i % len(SALT)] for i, b in enumerate(mixed))

    def reply(self) -> MysqlPacket:
        return MysqlPacket(self._replies.pop(0), "utf8")


def test_pymysql_completes_caching_sha2_full_authentication_on_plain_text():
    server = ScriptedServer()
    switch = MysqlPacket(b"\xfecaching_sha2_password\0" + SALT + b"\0", "utf8")
    switch.advance(1)
    switch.read_string()                     # the plugin name, as pymysql reads it first
    result = pymysql_auth.caching_sha2_password_auth(server, switch)
    assert result.is_ok_packet()
    assert server.received[1] == b"\x02" and len(server.received) == 3


def test_the_sidecar_extra_installs_cryptography():
    requires = importlib.metadata.requires(cachesync.DISTRIBUTION)
    assert any(r.startswith("cryptography") and 'extra == "sidecar"' in r for r in requires)
    assert pymysql_has_cryptography()


def test_compose_mysql_uses_caching_sha2_not_native_password():
    mysql = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["mysql"]
    assert not any("native-password" in flag for flag in mysql["command"])
    init = (ROOT / "docker" / "mysql-init.sql").read_text()
    statements = [line for line in init.splitlines() if not line.startswith("--")]
    assert "IDENTIFIED WITH caching_sha2_password" in "\n".join(statements)
    assert "mysql_native_password" not in "\n".join(statements)
