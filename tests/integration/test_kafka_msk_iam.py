"""AWS_MSK_IAM against a scripted broker: no MSK cluster can run here, so a small TLS server
in this file speaks the Kafka frames of a SASL login (ApiVersions, SaslHandshake offering
AWS_MSK_IAM, SaslAuthenticate), checks the signed payload cachesync's configured client
sends (SigV4 recomputed here from the secret key: action ``kafka-cluster:Connect``, host,
region, credential scope, session token) and accepts or refuses it. Credentials come from
the AWS chain: environment variables in one case, a named profile in the other."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from urllib.parse import quote

import pytest
from kafka import KafkaConsumer
from kafka.errors import KafkaError
from kafka.protocol.metadata.api_versions import ApiVersionsResponse
from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse,
                                 SaslHandshakeResponse)

from cachesync.runtime.config import KafkaSettings
from cachesync.runtime.kafka_security import consumer_options

pytestmark = pytest.mark.integration

ACCESS_KEY, SECRET_KEY, SESSION_TOKEN = "AKIDCACHESYNCTEST", "s3cr3t/kEy+EXAMPLE", "FwoGZXIv//token=="
REGION = "eu-west-3"
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
OFFERED = [(0, 0, 12), (3, 0, 12), (SASL_HANDSHAKE, 0, 1), (API_VERSIONS, 0, 4),
           (SASL_AUTHENTICATE, 0, 2)]


class ScriptedMskBroker(threading.Thread):
    """Accepts TLS connections and plays the broker's side of an AWS_MSK_IAM login; keeps
    every SaslAuthenticate payload (``payloads``) and the API key of the first request sent
    after an accepted login (``after_login``), then closes the connection."""

    def __init__(self, context: ssl.SSLContext, accept: bool):
        super().__init__(daemon=True)
        self.accept, self.payloads, self.after_login = accept, [], []
        self._context = context
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                raw, _ = self._server.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)
        self._server.close()

    def _serve(self, raw: socket.socket) -> None:
        try:
            with self._context.wrap_socket(raw, server_side=True) as conn:
                while (frame := _read_frame(conn)) is not None:
                    if not self._answer(conn, frame):
                        return
        except (OSError, ssl.SSLError):
            return

    def _answer(self, conn, frame: bytes) -> bool:
        api_key, version, correlation = struct.unpack(">hhi", frame[:8])
        if api_key == API_VERSIONS:
            keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                    for k, lo, hi in OFFERED]
            reply = ApiVersionsResponse(version=version, error_code=0, api_keys=keys,
                                        throttle_time_ms=0)
        elif api_key == SASL_HANDSHAKE:
            reply = SaslHandshakeResponse(version=version, error_code=0,
                                          mechanisms=["AWS_MSK_IAM"])
        elif api_key == SASL_AUTHENTICATE:
            request = SaslAuthenticateRequest.decode(frame, version=version, header=True)
            self.payloads.append(json.loads(bytes(request.auth_bytes)))
            reply = (SaslAuthenticateResponse(version=version, error_code=0, error_message=None,
                                              auth_bytes=b'{"version":"2020_10_22","request-id":"1"}',
                                              session_lifetime_ms=0)
                     if self.accept else
                     SaslAuthenticateResponse(version=version, error_code=58,
                                              error_message="[1] Access denied", auth_bytes=b"",
                                              session_lifetime_ms=0))
        else:
            self.after_login.append(api_key)
            return False
        reply.with_header(correlation_id=correlation)
        conn.sendall(reply.encode(header=True, framed=True))
        return True


def _read_frame(conn) -> bytes | None:
    head = _read_exactly(conn, 4)
    return None if head is None else _read_exactly(conn, struct.unpack(">i", head)[0])


def _read_exactly(conn, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def sigv4(payload: dict, secret_key: str) -> str:
    """The signature AWS computes for the payload's fields (the aws-msk-iam-auth scheme:
    a presigned GET / with the Connect action, one signed header: host)."""
    query = {"Action": payload["action"], "X-Amz-Algorithm": payload["x-amz-algorithm"],
             "X-Amz-Credential": payload["x-amz-credential"], "X-Amz-Date": payload["x-amz-date"],
             "X-Amz-Expires": payload["x-amz-expires"],
             "X-Amz-SignedHeaders": payload["x-amz-signedheaders"]}
    if "x-amz-security-token" in payload:
        query["X-Amz-Security-Token"] = payload["x-amz-security-token"]
    canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
                               for k, v in sorted(query.items()))
    canonical = "\n".join(["GET", "/", canonical_query, f"host:{payload['host']}\n", "host",
                           hashlib.sha256(b"").hexdigest()])
    scope = payload["x-amz-credential"].split("/", 1)[1]
    to_sign = "\n".join([payload["x-amz-algorithm"], payload["x-amz-date"], scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in scope.split("/"):      # date, region, service, aws4_request
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def check_signed_login(payload: dict, access_key: str, secret_key: str, token: str | None):
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")
    assert payload["action"] == "kafka-cluster:Connect"
    assert payload["host"] == "localhost"
    assert payload["x-amz-credential"] == f"{access_key}/{today}/{REGION}/kafka-cluster/aws4_request"
    assert payload.get("x-amz-security-token") == token
    signed_at = datetime.datetime.strptime(payload["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=datetime.timezone.utc)
    assert abs(time.time() - signed_at.timestamp()) < 300
    assert payload["x-amz-signature"] == sigv4(payload, secret_key)


@pytest.fixture
def tls(tmp_path):
    """(server context, CA file) for a self-signed certificate naming localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "broker.crt", tmp_path / "broker.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, str(cert_file)


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """No AWS configuration of this machine leaks in: no files, no instance metadata."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    # kafka.aws_region sets AWS_DEFAULT_REGION for the process: restored (absent) after
    monkeypatch.setenv("AWS_DEFAULT_REGION", "")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_msk_iam_login_is_signed_for_the_broker_with_env_credentials(tls, aws_env, monkeypatch):
    """Environment credentials and kafka.aws_region: the payload is a valid SigV4 signature
    for localhost in that region, and after the broker accepts it the client goes on."""
    context, cafile = tls
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    broker = ScriptedMskBroker(context, accept=True)
    broker.start()
    k = KafkaSettings(bootstrap_servers=f"localhost:{broker.port}", security_protocol="SASL_SSL",
                      sasl_mechanism="AWS_MSK_IAM", aws_region=REGION, ssl_cafile=cafile)
    try:
        with pytest.raises(KafkaError):   # the scripted broker ends every connection after login
            KafkaConsumer(bootstrap_servers=k.bootstrap_servers,
                          **{**consumer_options(k), "bootstrap_timeout_ms": 3000})
    finally:
        broker.stop()
    assert broker.payloads, "no SaslAuthenticate request reached the broker"
    check_signed_login(broker.payloads[0], ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)
    assert broker.after_login, "the client did not go on after the accepted login"


def test_msk_iam_refused_login_stops_consume_with_exit_3(lab, tls, aws_env, tmp_path):
    """`cachesync consume` with a named profile's credentials (no session token) and the
    region from the profile: the broker refuses, cachesync stops with exit 3, never printing
    the secret key."""
    context, cafile = tls
    (tmp_path / "credentials").write_text(
        f"[ops]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = {SECRET_KEY}\n")
    (tmp_path / "config").write_text(f"[profile ops]\nregion = {REGION}\n")
    broker = ScriptedMskBroker(context, accept=False)
    broker.start()
    env = {**os.environ, **lab.stack.env,
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
           "AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_PROFILE": "ops",
           "CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": f"localhost:{broker.port}",
           "CACHESYNC_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "CACHESYNC_KAFKA_SASL_MECHANISM": "AWS_MSK_IAM",
           "CACHESYNC_KAFKA_SSL_CAFILE": cafile,
           "CACHESYNC_KAFKA_CONSUMER_PROPERTIES": '{"bootstrap_timeout_ms": 5000}'}
    try:
        out = subprocess.run([sys.executable, "-m", "cachesync", "consume", "--config",
                              lab.write_config({"users": {"keys": ["user:{id}"]}})],
                             env=env, capture_output=True, text=True, timeout=180)
    finally:
        broker.stop()
    assert out.returncode == 3, out.stderr[-3000:]
    assert "refused the login" in out.stderr and "Access denied" in out.stderr, out.stderr[-3000:]
    assert SECRET_KEY not in out.stderr + out.stdout
    check_signed_login(broker.payloads[0], "AKIDPROFILE", SECRET_KEY, None)
