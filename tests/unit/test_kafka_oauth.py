"""OAUTHBEARER token providers and the login settings of every mechanism (pure parts; the
broker side is tests/integration/test_kafka_security.py and test_kafka_msk_iam.py)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import sys
import time

import pytest

from cachesync.runtime.config import KafkaSettings
from cachesync.runtime.kafka_oauth import TokenCommand, TokenFile, parse_extensions, token_expiry
from cachesync.runtime.kafka_security import client_security, spark_kafka_options
from cachesync.schema.errors import ConfigError


def jwt(**claims) -> str:
    def part(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    return part({"alg": "none"}) + "." + part(claims) + "."


@pytest.mark.parametrize("token, expected", [
    (jwt(exp=1700000000), 1700000000.0),
    (jwt(sub="x"), None),                        # no exp
    (jwt(exp="soon"), None),
    ("opaque-token", None),                      # not a JWT
    ("a.!!!.c", None),
])
def test_token_expiry_reads_the_exp_claim_only(token, expected):
    assert token_expiry(token) == expected


def test_extensions_parse_and_refuse_what_is_not_key_value():
    assert parse_extensions("logicalCluster=lkc-1, identityPoolId=pool-2") == {
        "logicalCluster": "lkc-1", "identityPoolId": "pool-2"}
    assert parse_extensions("") == {}
    for bad in ("novalue", "a b=c", "auth=x"):
        with pytest.raises(ConfigError, match="kafka.sasl_oauth_extensions"):
            parse_extensions(bad)


def test_token_file_is_read_again_when_it_changes(tmp_path):
    path = tmp_path / "token"
    path.write_text("first\n")
    provider = TokenFile(str(path), {"logicalCluster": "lkc-1"})
    assert provider.token() == "first" and provider.extensions() == {"logicalCluster": "lkc-1"}
    path.write_text("second-token\n")
    assert provider.token() == "second-token"
    path.unlink()
    with pytest.raises(ConfigError, match="cannot read"):
        provider.token()
    assert "first" not in repr(provider) and str(path) in repr(provider)


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def command_printing(tmp_path, *outputs: str) -> str:
    """A command printing the next of ``outputs`` on each run (a failing run for None)."""
    script, state = tmp_path / "cmd.py", tmp_path / "runs"
    script.write_text(
        "import json, pathlib, sys\n"
        f"outs = {list(outputs)!r}\n"
        f"p = pathlib.Path({str(state)!r}); n = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n + 1)); out = outs[min(n, len(outs) - 1)]\n"
        "sys.exit(print('denied', file=sys.stderr) or 5) if out is None else print(out)\n")
    return f"{sys.executable} {script}"


def test_token_command_runs_again_at_80_percent_of_the_lifetime(tmp_path):
    clock = Clock(1000.0)
    first, second = jwt(exp=1100), jwt(exp=1300)
    provider = TokenCommand(command_printing(tmp_path, first, second), 300, clock=clock)
    assert provider.token() == first
    clock.now = 1079                     # before 80 % of 100 s
    assert provider.token() == first
    clock.now = 1081
    assert provider.token() == second


def test_token_command_without_exp_is_renewed_after_max_age_and_reads_json(tmp_path):
    clock = Clock(0.0)
    answer = json.dumps({"access_token": "opaque-1", "expires_in": 3600})
    provider = TokenCommand(command_printing(tmp_path, answer, "opaque-2"), 60, clock=clock)
    assert provider.token() == "opaque-1"
    clock.now = 59
    assert provider.token() == "opaque-1"
    clock.now = 61                       # max age (60 s) comes before 80 % of 3600 s
    assert provider.token() == "opaque-2"


def test_a_failing_refresh_keeps_the_valid_token_and_then_fails_clearly(tmp_path, caplog):
    clock = Clock(1000.0)
    token = jwt(exp=1100)
    provider = TokenCommand(command_printing(tmp_path, token, None), 300, clock=clock)
    assert provider.token() == token
    clock.now = 1090                     # due for refresh, the run fails, token still valid
    assert provider.token() == token
    assert "exited with status 5: denied" in caplog.text and token not in caplog.text
    clock.now = 1101                     # expired and the command still fails
    with pytest.raises(ConfigError, match="exited with status 5: denied"):
        provider.token()


def test_token_command_output_that_is_no_token_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="printed no token"):
        TokenCommand(command_printing(tmp_path, "two words"), 60).token()


def test_providers_pickle_without_their_token_and_repr_hides_arguments(tmp_path):
    provider = TokenCommand(command_printing(tmp_path, "tok-1") + " --client-secret xyz", 60)
    assert provider.token() == "tok-1"
    blob = pickle.dumps(provider)
    assert b"tok-1" not in blob
    assert "xyz" not in repr(provider)
    assert pickle.loads(blob).token() == "tok-1"      # the copy runs the command itself


def oauth(**kw) -> KafkaSettings:
    return KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", **kw)


def test_client_security_carries_one_shared_provider(tmp_path):
    path = tmp_path / "token"
    path.write_text(jwt(exp=2_000_000_000))
    k = oauth(sasl_oauth_token_file=str(path))
    first, again = client_security(k), client_security(k)
    assert first["sasl_mechanism"] == "OAUTHBEARER" and "sasl_plain_password" not in first
    assert first["sasl_oauth_token_provider"] is again["sasl_oauth_token_provider"]
    with pytest.raises(ConfigError, match="cannot read"):
        client_security(oauth(sasl_oauth_token_file=str(tmp_path / "missing")))


def test_spark_takes_the_token_file_and_refuses_the_command(tmp_path):
    path = tmp_path / "token"
    options = spark_kafka_options(oauth(sasl_oauth_token_file=str(path),
                                        sasl_oauth_extensions="logicalCluster=lkc-1"))
    assert options["kafka.sasl.oauthbearer.token.endpoint.url"] == f"file://{path}"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
        'extension_logicalCluster="lkc-1";')
    with pytest.raises(ConfigError, match="cannot run a command"):
        spark_kafka_options(oauth(sasl_oauth_token_command="get-token"))
    msk = spark_kafka_options(KafkaSettings(security_protocol="SASL_SSL",
                                            sasl_mechanism="AWS_MSK_IAM"))
    assert msk["kafka.sasl.jaas.config"] == "software.amazon.msk.auth.iam.IAMLoginModule required;"


@pytest.mark.parametrize("fields, problem", [
    ({"sasl_mechanism": "OAUTHBEARER"}, "OAUTHBEARER needs exactly one of them"),
    ({"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_file": "/t",
      "sasl_oauth_token_command": "c"}, "OAUTHBEARER needs exactly one of them"),
    ({"sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p",
      "sasl_oauth_token_file": "/t"}, "only used with kafka.sasl_mechanism OAUTHBEARER"),
    ({"sasl_mechanism": "AWS_MSK_IAM", "security_protocol": "SASL_PLAINTEXT"},
     "AWS_MSK_IAM needs SASL_SSL"),
    ({"sasl_mechanism": "SCRAM-SHA-512"}, "kafka.sasl_username and kafka.sasl_password"),
    ({"aws_region": "Ireland"}, "an AWS region"),
])
def test_login_settings_are_checked_at_load(fields, problem):
    with pytest.raises(ConfigError, match=problem):
        KafkaSettings(**{"security_protocol": "SASL_SSL", **fields})


def test_msk_iam_without_credentials_or_region_is_a_config_error(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    k = KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="AWS_MSK_IAM")
    with pytest.raises(ConfigError, match="kafka.aws_region"):
        client_security(k)
    with pytest.raises(ConfigError, match="no AWS credentials found"):
        client_security(KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="AWS_MSK_IAM",
                                      aws_region="eu-west-1"))


def test_kafka_pythons_debug_dumps_never_show_the_sasl_bytes(caplog):
    """kafka-python logs each request and its raw bytes at DEBUG: the SASL login (password,
    OAuth token) must not reach the log."""
    import logging
    import cachesync.runtime.kafka_login  # noqa: F401  (installs the filters)
    caplog.set_level(logging.DEBUG, logger="kafka")
    parser, conn = logging.getLogger("kafka.protocol.parser"), logging.getLogger("kafka.net.connection")
    parser.debug("%s Send: %r", "node=1", b"\x01auth=Bearer eyJsecret.token.\x01\x01")
    parser.debug("%s Sending request %d %s", "node=1", 3, "SaslAuthenticateRequest(auth_bytes=b'pw')")
    conn.debug("%s Request %d: %s", "<conn>", 3, "SaslAuthenticateRequest(auth_bytes=b'pw')")
    conn.debug("%s Request %d: %s", "<conn>", 4, "MetadataRequest(topics=[])")
    assert "eyJsecret" not in caplog.text and "auth_bytes" not in caplog.text
    assert "MetadataRequest" in caplog.text        # other requests stay visible


def test_a_token_command_that_hangs_is_killed_whole_and_its_arguments_stay_out(monkeypatch):
    monkeypatch.setattr("cachesync.runtime.kafka_oauth.COMMAND_TIMEOUT_S", 0.5)
    # the shell starts a child (sleep) that would outlive a kill of the shell alone
    # a duration of this run's own: another run of this test on the host has its sleep too
    seconds = f"31.{os.getpid()}"
    command = f"sh -c 'sleep {seconds}; echo never' client-secret-xyz"
    with pytest.raises(ConfigError) as raised:
        TokenCommand(command, 300).token()
    assert "did not finish within 0.5 s" in str(raised.value)
    assert "client-secret-xyz" not in str(raised.value) and "sleep" not in str(raised.value)
    assert "client-secret-xyz" not in repr(TokenCommand(command, 300))
    deadline = time.monotonic() + 10
    while sleepers(seconds) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sleepers(seconds)


def sleepers(seconds: str) -> list[str]:
    """The pids of running ``sleep <seconds>`` processes."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [b"sleep", seconds.encode()]:
                    with open(f"/proc/{pid}/stat", "rb") as st:
                        if st.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                            found.append(pid)
        except (OSError, IndexError):
            pass
    return found
