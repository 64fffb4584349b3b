"""Describing topics right after creating them: the broker's metadata may lag its
acknowledgement (KRaft), and a created topic must not be reported missing."""

from cachesync import topics


class LaggingAdmin:
    """An admin client whose metadata shows the created topics only from the n-th listing."""

    def __init__(self, names, visible_from):
        self.names, self.visible_from, self.listings = names, visible_from, 0

    def list_topics(self):
        self.listings += 1
        return list(self.names) if self.listings >= self.visible_from else []

    def describe_topics(self, names):
        return [{"name": n, "partitions": [{}, {}]} for n in names]

    def describe_configs(self, resources, config_filter=None):
        return {"topic": {r.name: {"retention.ms": {"value": "86400000"}} for r in resources}}


def test_created_topics_are_described_once_the_metadata_shows_them(monkeypatch):
    monkeypatch.setattr(topics, "VISIBLE_POLL_S", 0)
    admin = LaggingAdmin(["t", "t-dlq"], visible_from=3)
    states = topics._described_once_visible(admin, ["t", "t-dlq"], ["t", "t-dlq"])
    assert [s.describe() for s in states] == ["t: exists, 2 partition(s), retention 1 d",
                                              "t-dlq: exists, 2 partition(s), retention 1 d"]
    assert admin.listings == 3


def test_a_topic_never_created_is_not_waited_for(monkeypatch):
    admin = LaggingAdmin(["t"], visible_from=99)
    states = topics._described_once_visible(admin, ["t"], [])
    assert [s.describe() for s in states] == ["t: missing"] and admin.listings == 1


def test_metadata_that_never_shows_the_topic_is_reported_after_the_deadline(monkeypatch, caplog):
    monkeypatch.setattr(topics, "VISIBLE_POLL_S", 0)
    monkeypatch.setattr(topics, "ADMIN_TIMEOUT_MS", 50)
    admin = LaggingAdmin(["t"], visible_from=10**9)
    states = topics._described_once_visible(admin, ["t"], ["t"])
    assert [s.describe() for s in states] == ["t: missing"]
    assert "does not show it" in caplog.text and "t" in caplog.text
