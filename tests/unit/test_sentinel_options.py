"""How clients reach the sentinels themselves: their own login, TLS with redis.url's files."""

import pytest

from cachesync.runtime import config
from cachesync.schema.errors import ConfigError
from cachesync.wiring import sentinel_options

SENTINELS = {"CACHESYNC_REDIS_SENTINELS": "s1:26379,s2:26379", "CACHESYNC_REDIS_MASTER_NAME": "m"}


def _redis(environ):
    return config.load_section("redis", environ)


def test_without_sentinel_settings_only_timeouts_are_passed():
    assert sentinel_options(_redis(SENTINELS), {}, 2) == {"socket_timeout": 2,
                                                       "socket_connect_timeout": 2}


def test_the_sentinels_own_user_password_and_tls_files():
    r = _redis({**SENTINELS, "CACHESYNC_REDIS_SENTINEL_USERNAME": "watcher",
                "CACHESYNC_REDIS_SENTINEL_PASSWORD": "pw", "CACHESYNC_REDIS_SENTINEL_TLS": "true"})
    url = {"ssl_ca_certs": "/ca.pem", "ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem",
           "username": "app", "password": "master-pw", "db": 3}
    assert sentinel_options(r, url, None) == {
        "socket_timeout": None, "socket_connect_timeout": None, "username": "watcher",
        "password": "pw", "ssl": True, "ssl_ca_certs": "/ca.pem", "ssl_certfile": "/c.pem",
        "ssl_keyfile": "/k.pem"}                      # never the master's login or database


def test_the_password_stays_out_of_repr():
    r = _redis({**SENTINELS, "CACHESYNC_REDIS_SENTINEL_PASSWORD": "s3cret"})
    assert "s3cret" not in repr(r)


@pytest.mark.parametrize("name", ["SENTINEL_USERNAME", "SENTINEL_PASSWORD", "SENTINEL_TLS"])
def test_sentinel_settings_need_sentinels(name):
    value = "true" if name == "SENTINEL_TLS" else "x"
    with pytest.raises(ConfigError, match="only with redis.sentinels"):
        _redis({f"CACHESYNC_REDIS_{name}": value})
