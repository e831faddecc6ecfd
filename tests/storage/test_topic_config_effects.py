"""Kafka 4.2's topic configs in LogConfig, and compression.type's recompression on a partition log.

Every topic config Kafka 4.2 has is accepted under its topic and broker
names with Kafka's type, default and range; those that do nothing on one node
say why; the configs Kafka 4.0 removed are taken and dropped. A log whose
compression.type names a codec stores appended batches in it, records and
producer fields unchanged, and leaves batches already in it as they came.
"""
from __future__ import annotations

import json
import re

import pytest

import logstore
import logstore.formats.kafka as K
from logstore.config import LIST_CONFIGS, REMOVED_TOPIC_CONFIGS, TOPIC_CONFIG_DOCS, TOPIC_CONFIGS, LogConfig
from logstore.errors import InvalidConfigError, RecordTooLargeError
from logstore.log import Log
from logstore.manager import TOPIC_CONFIGS_FILE

TS = 1_700_000_000_000

# Kafka 4.2's LogConfig: every topic config, its type and default as Kafka's ConfigDef defines them.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": ("LIST", "delete"), "compression.gzip.level": ("INT", -1), "compression.lz4.level": ("INT", 9),
    "compression.type": ("STRING", "producer"), "compression.zstd.level": ("INT", 3),
    "delete.retention.ms": ("LONG", 86_400_000), "file.delete.delay.ms": ("LONG", 60_000),
    "flush.messages": ("LONG", (1 << 63) - 1), "flush.ms": ("LONG", (1 << 63) - 1),
    "follower.replication.throttled.replicas": ("LIST", ""), "index.interval.bytes": ("INT", 4096),
    "leader.replication.throttled.replicas": ("LIST", ""), "local.retention.bytes": ("LONG", -2),
    "local.retention.ms": ("LONG", -2), "max.compaction.lag.ms": ("LONG", (1 << 63) - 1),
    "max.message.bytes": ("INT", 1_048_588), "message.timestamp.after.max.ms": ("LONG", 3_600_000),
    "message.timestamp.before.max.ms": ("LONG", (1 << 63) - 1), "message.timestamp.type": ("STRING", "CreateTime"),
    "min.cleanable.dirty.ratio": ("DOUBLE", 0.5), "min.compaction.lag.ms": ("LONG", 0),
    "min.insync.replicas": ("INT", 1), "preallocate": ("BOOLEAN", False), "remote.log.copy.disable": ("BOOLEAN", False),
    "remote.log.delete.on.disable": ("BOOLEAN", False), "remote.storage.enable": ("BOOLEAN", False),
    "retention.bytes": ("LONG", -1), "retention.ms": ("LONG", 604_800_000), "segment.bytes": ("INT", 1 << 30),
    "segment.index.bytes": ("INT", 10_485_760), "segment.jitter.ms": ("LONG", 0), "segment.ms": ("LONG", 604_800_000),
    "unclean.leader.election.enable": ("BOOLEAN", False),
}


def test_every_kafka_topic_config_is_known_with_its_type_default_and_doc():
    assert TOPIC_CONFIGS.keys() == KAFKA_TOPIC_CONFIGS.keys()
    defaults = LogConfig().to_properties()
    assert {n: (TOPIC_CONFIG_DOCS[n].config_type, defaults[n]) for n in TOPIC_CONFIGS} == KAFKA_TOPIC_CONFIGS
    assert {n for n, doc in TOPIC_CONFIG_DOCS.items() if doc.config_type == "LIST"} == LIST_CONFIGS
    idle = {n for n, doc in TOPIC_CONFIG_DOCS.items() if not doc.has_effect}
    assert idle == {"unclean.leader.election.enable", "preallocate", "leader.replication.throttled.replicas",
                    "follower.replication.throttled.replicas", "remote.storage.enable", "local.retention.ms",
                    "local.retention.bytes", "remote.log.copy.disable", "remote.log.delete.on.disable"}
    assert all(doc.doc for doc in TOPIC_CONFIG_DOCS.values())


@pytest.mark.parametrize("props, attribute, value", [
    ({"compression.type": "zstd"}, "compression_type", "zstd"),
    ({"compression.type": "uncompressed"}, "compression_type", "uncompressed"),
    ({"compression.gzip.level": "9"}, "compression_gzip_level", 9),
    ({"compression.gzip.level": -1}, "compression_gzip_level", -1),
    ({"compression.lz4.level": 17}, "compression_lz4_level", 17),
    ({"compression.zstd.level": "-131072"}, "compression_zstd_level", -131072),
    ({"min.insync.replicas": "2"}, "min_insync_replicas", 2),
    ({"preallocate": "TRUE"}, "preallocate", True),
    ({"log.preallocate": " false "}, "preallocate", False),
    ({"unclean.leader.election.enable": True}, "unclean_leader_election_enable", True),
    ({"remote.storage.enable": "false"}, "remote_storage_enable", False),
    ({"remote.log.copy.disable": "true"}, "remote_log_copy_disable", True),
    ({"remote.log.delete.on.disable": "true"}, "remote_log_delete_on_disable", True),
    ({"log.local.retention.ms": "-1"}, "local_retention_ms", -1),
    ({"local.retention.bytes": "1000"}, "local_retention_bytes", 1000),
    ({"leader.replication.throttled.replicas": "0:1, 1:1"}, "leader_replication_throttled_replicas", "0:1,1:1"),
    ({"follower.replication.throttled.replicas": "*"}, "follower_replication_throttled_replicas", "*"),
    ({"follower.replication.throttled.replicas": ""}, "follower_replication_throttled_replicas", ""),
])
def test_kafka_4_2_topic_configs_are_accepted(props, attribute, value):
    assert getattr(LogConfig.from_properties(props), attribute) == value


@pytest.mark.parametrize("props, message", [
    ({"compression.type": "brotli"}, "Invalid value brotli for configuration compression.type: String must be one "
                                     "of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"compression.type": "none"}, "String must be one of"),
    ({"compression.gzip.level": 0}, "compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
    ({"compression.gzip.level": 10}, "Value must be between 1 and 9 or equal to -1"),
    ({"compression.lz4.level": 0}, "compression.lz4.level: Value must be at least 1"),
    ({"compression.lz4.level": 18}, "compression.lz4.level: Value must be no more than 17"),
    ({"compression.zstd.level": 23}, "Value must be no more than 22"),
    ({"compression.zstd.level": 1 << 31}, "Not a number of type INT"),
    ({"min.insync.replicas": 0}, "min.insync.replicas: Value must be at least 1"),
    ({"preallocate": "yes"}, "Invalid value yes for configuration preallocate: Expected value to be either true or "
                             "false"),
    ({"preallocate": 1}, "Expected value to be either true or false"),
    ({"local.retention.ms": -3}, "local.retention.ms: Value must be at least -2"),
    ({"leader.replication.throttled.replicas": "0:1,x"}, "leader.replication.throttled.replicas must be the literal "
                                                         "'*' or a list of replicas in the following format: "
                                                         "[partitionId]:[brokerId],[partitionId]:[brokerId],..."),
    ({"leader.replication.throttled.replicas": "*,0:1"}, "must be the literal '*'"),
    ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                                        "configured with remote log storage."),
    ({"message.timestamp.difference.max.ms": "1000"}, "Unknown topic config name: "
                                                      "message.timestamp.difference.max.ms"),
])
def test_bad_values_are_refused_as_kafka_words_it(props, message):
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        LogConfig.from_properties(props)


@pytest.mark.parametrize("name", sorted(REMOVED_TOPIC_CONFIGS))
def test_configs_kafka_4_removed_are_accepted_and_dropped(tmp_path, name):
    assert LogConfig.from_properties({name: "0.10.2-IV0", "retention.ms": 5}) == LogConfig(retention_ms=5)
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        store.create_topic("t", config={name: "2.8", "preallocate": "true", "compression.type": "lz4"})
        assert store.topic_overrides("t") == {"preallocate": True, "compression.type": "lz4"}
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        assert store.config_for("t") == LogConfig(preallocate=True, compression_type="lz4")


def test_boolean_and_list_overrides_survive_a_reopen(tmp_path):
    overrides = {"unclean.leader.election.enable": "true", "leader.replication.throttled.replicas": "0:1",
                 "min.insync.replicas": "2", "compression.zstd.level": "19"}
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        store.create_topic("t", config=overrides)
    assert json.loads((tmp_path / TOPIC_CONFIGS_FILE).read_text())["topics"]["t"] == {
        "unclean.leader.election.enable": True, "leader.replication.throttled.replicas": "0:1",
        "min.insync.replicas": 2, "compression.zstd.level": 19}
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        config = store.config_for("t")
        assert (config.unclean_leader_election_enable, config.leader_replication_throttled_replicas,
                config.min_insync_replicas, config.compression_zstd_level) == (True, "0:1", 2, 19)


# -- compression.type on a log -------------------------------------------------------------------------------------

def _batch(codec: int, count: int = 40, **fields) -> bytes:
    return K.encode_batch([b"k%d" % i for i in range(count)], [b"value %d " % i * 30 for i in range(count)],
                          [[("h", b"%d" % i)] for i in range(count)], [TS + i for i in range(count)],
                          compression=codec, **fields)


def _stored(log: Log) -> list[tuple[K.BatchHeader, list]]:
    with open(log.active_segment.log_path, "rb") as f:   # noqa: PTH123 (the segment's own bytes)
        data = f.read()
    return [(h, [(r.key, r.value, r.headers, r.timestamp, r.offset) for r in K.decode_records(data, h.position)])
            for h in K.iter_entries(data)]


@pytest.mark.parametrize("topic_codec", ["gzip", "snappy", "lz4", "zstd", "uncompressed"])
def test_a_log_with_a_codec_stores_batches_in_it_keeping_records_and_producer_fields(tmp_path, topic_codec):
    codec = K.CODEC_IDS["none" if topic_codec == "uncompressed" else topic_codec]
    with Log.open(str(tmp_path / "t-0"), LogConfig(compression_type=topic_codec)) as log:
        sources = [c for c in range(5) if c != codec]
        for i, source in enumerate(sources):
            log.append(_batch(source, producer_id=42, producer_epoch=3, base_sequence=40 * i, transactional=True))
        stored = _stored(log)
    assert [h.compression for h, _ in stored] == [codec] * len(sources)
    assert [(h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) for h, _ in stored] == \
        [(42, 3, 40 * i, True) for i in range(len(sources))]
    plain = [(r.key, r.value, r.headers, r.timestamp) for r in K.decode_records(_batch(0))]
    assert [[record[:4] for record in records] for _, records in stored] == [plain] * len(sources)
    assert [record[4] for _, records in stored for record in records] == list(range(40 * len(sources)))


def test_a_batch_in_the_topic_codec_is_appended_byte_for_byte(tmp_path):
    sent = _batch(K.GZIP, producer_id=7, producer_epoch=0, base_sequence=0)
    with Log.open(str(tmp_path / "t-0"), LogConfig(compression_type="gzip", compression_gzip_level=1)) as log:
        log.append(sent, leader_epoch=-1)
        with open(log.active_segment.log_path, "rb") as f:   # noqa: PTH123 (the segment's own bytes)
            assert f.read() == sent   # base offset 0 and no leader epoch written: nothing but the offsets moves


def test_the_topic_level_decides_how_hard_the_codec_works(tmp_path):
    sizes = {}
    for codec, levels in (("gzip", (1, 9)), ("zstd", (1, 19)), ("lz4", (9, 17))):
        for level in levels:
            config = LogConfig.from_properties({"compression.type": codec, f"compression.{codec}.level": level})
            with Log.open(str(tmp_path / f"{codec}{level}-0"), config) as log:
                log.append(_batch(0, count=400))
                (header, records), = _stored(log)
                assert len(records) == 400
                sizes[codec, level] = header.size_in_bytes
    assert sizes["gzip", 9] < sizes["gzip", 1]
    assert sizes["zstd", 19] < sizes["zstd", 1]
    assert sizes["lz4", 17] < sizes["lz4", 9]


def test_a_batch_too_large_once_recompressed_is_refused_and_nothing_is_appended(tmp_path):
    config = LogConfig(compression_type="uncompressed", max_message_bytes=5000)
    with Log.open(str(tmp_path / "t-0"), config) as log:
        small = K.encode_batch([None], [b"x" * 20_000], compression=K.ZSTD)
        assert len(small) < 5000
        with pytest.raises(RecordTooLargeError, match="exceeds the maximum configured size of 5000"):
            log.append(small)
        assert log.log_end_offset == 0 and log.size == 0


def test_recompression_too_costly_for_the_event_loop_is_left_to_a_full_validation(tmp_path):
    with Log.open(str(tmp_path / "t-0"), LogConfig(compression_type="gzip")) as log:
        buf = bytearray(_batch(K.LZ4, count=2000))
        check_cost = K.validate_append(bytearray(buf)).check_cost   # what validation alone costs
        assert log.validate(buf, work_limit=check_cost) is None
        info = log.validate(buf)
        assert info is not None and info.records is not None and info.batches[0].compression == K.GZIP
        assert info.check_cost > check_cost
        log.append(buf, validated=info)
        assert [h.compression for h, _ in _stored(log)] == [K.GZIP]
        # Already gzip: a limit that covers validation lets it through, with nothing to rewrite.
        same = bytearray(_batch(K.GZIP, count=2000))
        checked = log.validate(same, work_limit=K.validate_append(bytearray(same)).check_cost)
        assert checked is not None and checked.records is None


def test_a_recompressed_batch_takes_log_append_time_with_a_crc_that_holds(tmp_path):
    config = LogConfig(compression_type="zstd", message_timestamp_type="LogAppendTime")
    with Log.open(str(tmp_path / "t-0"), config) as log:
        result = log.append(_batch(K.SNAPPY))
        (header, records), = _stored(log)   # iter_entries checks the CRC
    assert (header.compression, header.timestamp_type) == (K.ZSTD, K.LOG_APPEND_TIME)
    assert header.max_timestamp == result.log_append_time > TS
    assert [r[3] for r in records] == [result.log_append_time] * 40
