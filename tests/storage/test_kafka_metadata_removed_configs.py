"""A Kafka 3.x directory whose topics carry configs Kafka 4 removed (message.format.version) opens, and
keeps opening: the removed configs are dropped on import as Kafka 4 drops them."""
from __future__ import annotations

import logstore
from test_cluster_metadata import MetadataLog, config, partition, topic


def test_a_topic_with_only_removed_configs_opens_again_without_overrides(tmp_path):
    log = MetadataLog(tmp_path / "__cluster_metadata-0")
    log.batch(topic("t", 1), partition(1, 0), config("t", "message.format.version", "2.8-IV1"),
              topic("u", 2), partition(2, 0), config("u", "message.downconversion.enable", "false"),
              config("u", "retention.ms", "60000"))
    (tmp_path / "t-0").mkdir()
    (tmp_path / "u-0").mkdir()
    for _ in range(2):
        with logstore.open(str(tmp_path)) as store:
            assert store.topic_overrides("t") == {}
            assert store.topic_overrides("u") == {"retention.ms": 60000}
