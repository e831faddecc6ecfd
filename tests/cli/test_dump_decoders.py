"""`logstore dump` with Kafka's record decoders: --offsets-decoder, --transaction-log-decoder,
--cluster-metadata-decoder.

Three sources of files, each checked against knowledge the dump did not produce:

- a real `logstore broker` process, driven by kafka-python and confluent-kafka (a classic group
  committing offsets with metadata, a KIP-848 group, a group deleted by the admin client, a
  transactional producer that commits then aborts): the decoded `__consumer_offsets` must fold to
  the offsets committed, its raw bytes must be those kafka-python reads, the `__transaction_state`
  records must name the producer id kafka-python finds on the data partitions;
- a `__cluster_metadata-0` directory whose record values are put together here with `struct` from
  Kafka's message schemas;
- the decoders in process, on record bytes put together with `struct`, against the strings of
  Kafka's DumpLogSegmentsTest where it has them;
- Kafka's own log dirs in tests/fixtures/real-kafka, when they are there: every file dumps, and the
  decoded committed offsets are the oracle's.
"""
from __future__ import annotations

import base64
import json
import struct
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

import logstore.formats.kafka as K
from dump_cli import json_docs
from dump_cli import run_dump as _run_dump
from logstore.broker.coordinator.record_json import offsets_record, transaction_record
from logstore.dump_records import UnknownRecordType
from logstore.errors import CorruptRecordError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "realkafka"))
from broker_process import BrokerProcess, free_port  # noqa: E402

TIMEOUT = 30.0   # s: a bound on any one wait
TOPIC = "orders"
BROKER = ("offsets.topic.num.partitions=1", "transaction.state.log.num.partitions=1",
          "group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000",
          "group.consumer.min.heartbeat.interval.ms=100", "group.consumer.heartbeat.interval.ms=200",
          "group.consumer.min.session.timeout.ms=1000", "group.consumer.session.timeout.ms=2000")
TXN_ID = "dump-txn"
ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = 1, 2, 3, 4, 5


def run_dump(*args):
    """A dump over many files: a whole fixture dir's takes longer than one file's."""
    return _run_dump(*args, timeout=300)


def records_of(docs: list[dict]):
    """(batch, record) for every record of the dumped segments, in order."""
    for doc in docs:
        for batch in doc["batches"]:
            for record in batch.get("records", ()):
                yield batch, record


def fold_offsets(docs: list[dict]) -> dict[tuple[str, str, int], int]:
    """The committed offsets decoded OffsetCommit records leave: transactional ones count at their COMMIT."""
    offsets: dict[tuple[str, str, int], int] = {}
    pending: dict[int, list[dict]] = {}

    def apply(decoded: dict) -> None:
        key = decoded.get("key")
        if key is None or key["type"] not in ("0", "1"):
            return
        k = (key["data"]["group"], key["data"]["topic"], key["data"]["partition"])
        if decoded["payload"] == "<DELETE>":
            offsets.pop(k, None)
        else:
            offsets[k] = decoded["payload"]["data"]["offset"]

    for batch, record in records_of(docs):
        if batch["isControl"]:
            staged = pending.pop(batch["producerId"], [])
            if record["controlKey"]["typeName"] == "COMMIT":
                for decoded in staged:
                    apply(decoded)
        elif batch["isTransactional"]:
            pending.setdefault(batch["producerId"], []).append(record["decoded"])
        else:
            apply(record["decoded"])
    return offsets


def kafka_python_batches(path: Path) -> list:
    """The batches of a segment as kafka-python decodes them (each with its records listed)."""
    found = []
    records = MemoryRecords(path.read_bytes())
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch) and batch.validate_crc()
        found.append((batch, list(batch)))
    return found


def segments(partition: Path) -> list[Path]:
    return sorted(partition.glob("*.log"))


# ---------------------------------------------------------------------------
# A broker's __consumer_offsets and __transaction_state


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"not within {TIMEOUT} s: {what}"


def drive_clients(bootstrap: str) -> dict:
    """What the clients did that the files must show: offsets committed, groups deleted."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(TIMEOUT)

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 5})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(TOPIC, b"committed %d" % i, partition=0 if i < 3 else 1)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    for i in range(2):
        producer.produce(TOPIC, b"aborted %d" % i, partition=0)
    assert producer.flush(TIMEOUT) == 0
    producer.abort_transaction(TIMEOUT)

    classic = KafkaConsumer(bootstrap_servers=bootstrap, group_id="dump-classic", client_id="dump-client",
                            enable_auto_commit=False, auto_offset_reset="earliest")
    # The topic's partitions known before the join: kafka-python's leader that assigns without them (its
    # range assignor's "No partition metadata") was seen to keep an empty assignment past the timeout.
    _wait(lambda: classic.partitions_for_topic(TOPIC) == {0, 1}, "the topic's partitions")
    classic.subscribe([TOPIC])
    _wait(lambda: classic.poll(timeout_ms=100) is not None and classic.assignment(), "a classic assignment")
    classic.commit({KTP(TOPIC, 0): OffsetAndMetadata(2, "meta-a", -1), KTP(TOPIC, 1): OffsetAndMetadata(1, "", -1)})
    classic.close()

    modern = Consumer({"bootstrap.servers": bootstrap, "group.id": "dump-848", "group.protocol": "consumer",
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    modern.subscribe([TOPIC])
    _wait(lambda: modern.poll(0.1) is not None or modern.assignment(), "a KIP-848 assignment")
    _wait(lambda: modern.poll(0.1) is None and len(modern.assignment()) == 2, "both partitions")
    modern.commit(offsets=[TopicPartition(TOPIC, 0, 3)], asynchronous=False)
    modern.close()

    gone = Consumer({"bootstrap.servers": bootstrap, "group.id": "dump-gone", "enable.auto.commit": False})
    gone.commit(offsets=[TopicPartition(TOPIC, 1, 1)], asynchronous=False)
    gone.close()
    for future in admin.delete_consumer_groups(["dump-gone"]).values():
        future.result(TIMEOUT)
    return {"committed": {("dump-classic", TOPIC, 0): 2, ("dump-classic", TOPIC, 1): 1,
                          ("dump-848", TOPIC, 0): 3}}


@pytest.fixture(scope="module")
def broker_dir(tmp_path_factory) -> tuple[Path, dict]:
    data_dir = tmp_path_factory.mktemp("broker") / "data"
    data_dir.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data_dir, BROKER).start()
    try:
        facts = drive_clients(broker.bootstrap)
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()
    return data_dir, facts


def offsets_docs(data_dir: Path, *flags) -> list[dict]:
    result = run_dump("--json", "--offsets-decoder", *flags, *segments(data_dir / "__consumer_offsets-0"))
    assert result.returncode == 0, result.stderr
    return json_docs(result)


def test_decoded_offset_commits_fold_to_the_offsets_committed(broker_dir):
    data_dir, facts = broker_dir
    folded = fold_offsets(offsets_docs(data_dir))
    assert {k: v for k, v in folded.items() if k[0].startswith("dump-")} == facts["committed"]


def test_offset_commit_and_group_metadata_as_kafka_prints_them(broker_dir):
    data_dir, _ = broker_dir
    result = run_dump("--offsets-decoder", *segments(data_dir / "__consumer_offsets-0"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    commit = [line for line in lines if '"group":"dump-classic","topic":"orders","partition":0}' in line]
    assert len(commit) == 1
    assert commit[0].startswith("| offset: ")
    payload = json.loads(commit[0].split(" payload: ", 1)[1])
    key = commit[0].split(" key: ", 1)[1].split(" payload: ", 1)[0]
    assert key == '{"type":"1","data":{"group":"dump-classic","topic":"orders","partition":0}}'
    assert payload["version"] == "3"
    assert list(payload["data"]) == ["offset", "leaderEpoch", "metadata", "commitTimestamp"]
    assert (payload["data"]["offset"], payload["data"]["metadata"]) == (2, "meta-a")

    groups = [json.loads(line.split(" payload: ", 1)[1]) for line in lines
              if ' key: {"type":"2","data":{"group":"dump-classic"}}' in line and "<DELETE>" not in line]
    assert groups, "no GroupMetadata record for the classic group"
    stable = [g for g in groups if g["data"]["members"]][-1]["data"]  # after the SyncGroup
    assert (stable["protocolType"], stable["protocol"]) == ("consumer", "range")
    [member] = stable["members"]
    assert member["clientId"] == "dump-client" and member["memberId"].startswith("dump-client")
    assert member["subscription"]["topics"] == [TOPIC]
    assert member["assignment"]["assignedPartitions"] == [{"topic": TOPIC, "partitions": [0, 1]}]


def test_raw_records_are_the_bytes_kafka_python_reads(broker_dir):
    data_dir, _ = broker_dir
    docs = offsets_docs(data_dir)
    ours = [(r["offset"], r["key"] and r["key"]["hex"], r["value"] and r["value"]["hex"])
            for b, r in records_of(docs)]
    theirs = [(r.offset, r.key and r.key.hex(), r.value and r.value.hex())
              for path in segments(data_dir / "__consumer_offsets-0")
              for _, records in kafka_python_batches(path) for r in records]
    assert ours == theirs and len(ours) > 10


def test_kip848_and_tombstone_records(broker_dir):
    data_dir, _ = broker_dir
    decoded = [r["decoded"] for b, r in records_of(offsets_docs(data_dir)) if not b["isControl"]]
    types = {d["key"]["type"] for d in decoded if "key" in d}
    assert {"1", "2", "3", "5", "6", "7", "8"} <= types
    topic_id = next(line.split(": ", 1)[1] for line in (data_dir / f"{TOPIC}-0" / "partition.metadata")
                    .read_text().splitlines() if line.startswith("topic_id"))
    modern = [d for d in decoded if "key" in d and d["key"]["data"].get("groupId") == "dump-848"
              and d["payload"] != "<DELETE>"]
    members = [d["payload"]["data"] for d in modern if d["key"]["type"] == "5"]
    assert members and members[-1]["subscribedTopicNames"] == [TOPIC]
    assignments = [d["payload"]["data"] for d in modern if d["key"]["type"] == "8"]
    owned = {(tp["topicId"], p) for a in assignments[-1:] for tp in a["assignedPartitions"] for p in tp["partitions"]}
    assert owned == {(topic_id, 0), (topic_id, 1)}
    epochs = [d["payload"]["data"]["epoch"] for d in modern if d["key"]["type"] == "3"]
    assert epochs and epochs == sorted(epochs) and epochs[0] >= 1
    gone = [d for d in decoded if "key" in d and d["key"]["data"].get("group") == "dump-gone"]
    assert gone[-1]["payload"] == "<DELETE>"
    assert {d["key"]["type"] for d in gone if d["payload"] == "<DELETE>"} == {"1", "2"}


def data_partition_producer(data_dir: Path) -> tuple[int, int]:
    """(producer id, epoch) of the transactional batches kafka-python finds on the data partitions."""
    found = {(b.producer_id, b.producer_epoch) for p in (0, 1) for path in segments(data_dir / f"{TOPIC}-{p}")
             for b, _ in kafka_python_batches(path) if b.is_transactional}
    [(pid, epoch)] = {f for f in found if f[0] >= 0}
    return pid, epoch


def test_transaction_log_names_the_producer_of_the_data(broker_dir):
    data_dir, _ = broker_dir
    pid, epoch = data_partition_producer(data_dir)
    result = run_dump("--json", "--transaction-log-decoder", *segments(data_dir / "__transaction_state-0"))
    assert result.returncode == 0, result.stderr
    mine = [r["decoded"] for b, r in records_of(json_docs(result))
            if r["decoded"]["key"]["data"] == {"transactionalId": TXN_ID} and r["decoded"]["payload"] != "<DELETE>"]
    assert {d["payload"]["data"]["producerId"] for d in mine} == {pid}
    states = [d["payload"]["data"]["transactionStatus"] for d in mine]
    it = iter(states)
    assert all(s in it for s in (ONGOING, PREPARE_COMMIT, COMPLETE_COMMIT, ONGOING, PREPARE_ABORT,
                                 COMPLETE_ABORT)), states
    prepare = next(d["payload"]["data"] for d in mine if d["payload"]["data"]["transactionStatus"] == PREPARE_COMMIT)
    assert prepare["transactionPartitions"] == [{"topic": TOPIC, "partitionIds": [0, 1]}]
    assert prepare["producerEpoch"] == epoch
    text = run_dump("--transaction-log-decoder", *segments(data_dir / "__transaction_state-0")).stdout
    assert f' key: {{"type":"0","data":{{"transactionalId":"{TXN_ID}"}}}} payload: {{"version":"1","data":' \
           f'{{"producerId":{pid},"producerEpoch":{epoch},' in text


def test_txnindex_and_snapshot_of_the_data_partition(broker_dir):
    data_dir, _ = broker_dir
    pid, epoch = data_partition_producer(data_dir)
    part = data_dir / f"{TOPIC}-0"
    batches = [b for path in segments(part) for b in kafka_python_batches(path)]
    aborted = [records[0].offset for b, records in batches
               if b.is_transactional and not b.is_control_batch and records[0].value.startswith(b"aborted")]
    marker = [records[0].offset for b, records in batches if b.is_control_batch][-1]
    [txnindex] = part.glob("*.txnindex")
    lines = run_dump(txnindex).stdout.splitlines()
    assert lines[1].startswith(f"version: 0 producerId: {pid} firstOffset: {aborted[0]} lastOffset: {marker} ")
    snapshot = max(part.glob("*.snapshot"))
    line = run_dump(snapshot).stdout.splitlines()[1]
    assert line.startswith(f"producerId: {pid} producerEpoch: {epoch} ")
    assert "currentTxnFirstOffset: OptionalLong.empty" in line


def test_every_file_of_the_broker_dumps_with_its_decoder(broker_dir):
    data_dir, _ = broker_dir
    dump_every_file(data_dir)


def dump_every_file(log_dir: Path, formats=((), ("--json",))) -> None:
    """Dump each file of a log dir (text, and JSON) with the decoder of its topic; all must be intact,
    but an index whose .log is missing (not copied into a fixture) is a bad path."""
    by_flags: dict[tuple[str, ...], list[Path]] = {}
    orphans = []
    for path in sorted(p for p in log_dir.rglob("*") if p.is_file()):
        if path.suffix in (".index", ".timeindex") and not path.with_suffix(".log").exists():
            orphans.append(path)
        else:
            by_flags.setdefault(decoder_flags(path), []).append(path)
    for flags, paths in by_flags.items():
        for extra in formats:
            result = run_dump(*flags, *extra, "--files", ",".join(map(str, paths)))
            assert "Traceback" not in result.stderr
            assert result.returncode == 0, result.stderr[-4000:]
            assert result.stdout.count("Dumping " if not extra else '"file": ') == len(paths)
    for path in orphans:
        result = run_dump(path)
        assert result.returncode == 2
        assert result.stderr.splitlines() == [f"logstore dump: {path}: no {path.stem}.log beside it: its entries "
                                              "are not checked against the log"]


def decoder_flags(path: Path) -> tuple[str, ...]:
    topic = path.parent.name.rpartition("-")[0]
    return {"__consumer_offsets": ("--offsets-decoder",), "__transaction_state": ("--transaction-log-decoder",),
            "__cluster_metadata": ("--cluster-metadata-decoder",)}.get(topic, ("--print-data-log",))


# ---------------------------------------------------------------------------
# KRaft metadata, from Kafka's schemas


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def compact_string(s: str) -> bytes:
    data = s.encode()
    return uvarint(len(data) + 1) + data


def topic_record(name: str, topic_id: bytes) -> bytes:
    """TopicRecord v0 in its ApiMessageAndVersion frame: frame 1, api key 2, version 0, Name, TopicId, no tags."""
    return uvarint(1) + uvarint(2) + uvarint(0) + compact_string(name) + topic_id + b"\x00"


def feature_level_record(name: str, level: int) -> bytes:
    """FeatureLevelRecord v0 (api key 12): Name, FeatureLevel int16, no tags."""
    return uvarint(1) + uvarint(12) + uvarint(0) + compact_string(name) + struct.pack(">h", level) + b"\x00"


def control(control_type: int, value: bytes, offset: int) -> bytes:
    return K.encode_batch([struct.pack(">hh", 0, control_type)], [value], base_offset=offset, control=True,
                          timestamps=1_700_000_000_000)


def header_value(timestamp: int) -> bytes:
    """SnapshotHeaderRecord v0: Version int16, LastContainedLogTimestamp int64, no tags."""
    return struct.pack(">hq", 0, timestamp) + b"\x00"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def test_cluster_metadata_log_and_snapshot(tmp_path):
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    topic_id = uuid.UUID(int=0x1234).bytes
    values = [topic_record(TOPIC, topic_id), feature_level_record("metadata.version", 21)]
    log = part / f"{0:020d}.log"
    log.write_bytes(K.encode_batch([None, None], values, timestamps=5))
    snapshot = part / f"{2:020d}-{7:010d}.checkpoint"
    snapshot.write_bytes(control(3, header_value(10_000), 0) + K.encode_batch([None, None], values, base_offset=1,
                                                                              timestamps=5)
                         + control(4, struct.pack(">h", 0) + b"\x00", 3))
    topic_json = f'{{"type":"TOPIC_RECORD","version":0,"data":{{"name":"{TOPIC}","topicId":"{b64url(topic_id)}"}}}}'
    feature_json = '{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":21}}'
    result = run_dump("--cluster-metadata-decoder", log, snapshot)
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[1] == "Log starting offset: 0"
    assert lines[3].endswith(f"headerKeys: [] payload: {topic_json}")
    assert lines[4].endswith(f"headerKeys: [] payload: {feature_json}")
    assert lines[6] == "Snapshot end offset: 2, epoch: 7"
    assert lines[8].endswith('SnapshotHeader {"version":0,"lastContainedLogTimestamp":10000}')
    assert lines[10].endswith(f"payload: {topic_json}") and lines[11].endswith(f"payload: {feature_json}")
    assert lines[13].endswith('SnapshotFooter {"version":0}')
    skipped = run_dump("--cluster-metadata-decoder", "--skip-record-metadata", snapshot).stdout.splitlines()
    assert [line for line in skipped if line.startswith("|")] == [f"| payload: {topic_json}",
                                                                   f"| payload: {feature_json}"]
    [doc] = json_docs(run_dump("--json", "--cluster-metadata-decoder", snapshot))
    assert (doc["kind"], doc["snapshotEndOffset"], doc["snapshotEpoch"], doc["bootstrap"]) == (
        "kraftSnapshot", 2, 7, False)
    assert doc["batches"][0]["records"][0]["controlData"] == {"version": 0, "lastContainedLogTimestamp": 10_000}
    assert doc["batches"][1]["records"][0]["decoded"] == {"key": None, "payload": json.loads(topic_json)}


def test_kraft_bootstrap_snapshot_heading(tmp_path):
    path = tmp_path / "bootstrap.checkpoint"
    path.write_bytes(K.encode_batch([None], [feature_level_record("metadata.version", 21)], timestamps=5))
    lines = run_dump("--cluster-metadata-decoder", path).stdout.splitlines()
    assert lines[1] == "KRaft bootstrap snapshot"


def test_metadata_records_the_decoder_cannot_read(tmp_path):
    path = tmp_path / f"{0:020d}.log"
    newer = uvarint(1) + uvarint(9999) + uvarint(0) + b"\x00"
    truncated = topic_record(TOPIC, bytes(16))[:-5]
    path.write_bytes(K.encode_batch([None, None], [newer, truncated], timestamps=5))
    result = run_dump("--cluster-metadata-decoder", path)
    assert result.returncode == 1
    records = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert '"type":"UNKNOWN","version":0,"data":{}' in records[0] and '"note":' in records[0]
    assert records[1].endswith("key: Error at offset 1, skipping. metadata record is truncated")
    assert result.stderr.splitlines() == [
        f"logstore dump: {path}: batch at position 0: record at offset 1: the cluster metadata decoder cannot "
        "read it: metadata record is truncated (at byte 0)"]


# ---------------------------------------------------------------------------
# The decoders in process, on bytes built from Kafka's schemas


def string(s: str | None) -> bytes:
    return struct.pack(">h", -1) if s is None else struct.pack(">h", len(s.encode())) + s.encode()


def blob(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


def compact_bytes(b: bytes) -> bytes:
    return uvarint(len(b) + 1) + b


def offset_key(version: int, group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", version) + string(group) + string(topic) + struct.pack(">i", partition)


@pytest.mark.parametrize("version, value, data", [
    (0, struct.pack(">hq", 0, 5) + string("m") + struct.pack(">q", 100),
     {"offset": 5, "metadata": "m", "commitTimestamp": 100}),
    (1, struct.pack(">hq", 1, 5) + string("") + struct.pack(">qq", 100, 200),
     {"offset": 5, "metadata": "", "commitTimestamp": 100, "expireTimestamp": 200}),
    (2, struct.pack(">hq", 2, 5) + string("m") + struct.pack(">q", 100),
     {"offset": 5, "metadata": "m", "commitTimestamp": 100}),
    (3, struct.pack(">hqi", 3, 5, 7) + string("m") + struct.pack(">q", 100),
     {"offset": 5, "leaderEpoch": 7, "metadata": "m", "commitTimestamp": 100}),
    (4, struct.pack(">hqi", 4, 5, 7) + compact_string("m") + struct.pack(">q", 100) + b"\x00",
     {"offset": 5, "leaderEpoch": 7, "metadata": "m", "commitTimestamp": 100}),
])
def test_offset_commit_value_versions(version, value, data):
    key, payload = offsets_record(offset_key(1, "g", "t", 3), value)
    assert key == {"type": "1", "data": {"group": "g", "topic": "t", "partition": 3}}
    assert payload == {"version": str(version), "data": data}
    assert list(payload["data"]) == list(data)  # Kafka's field order
    assert offsets_record(offset_key(0, "g", "t", 3), None) == (
        {"type": "0", "data": {"group": "g", "topic": "t", "partition": 3}}, "<DELETE>")


def subscription_v3() -> bytes:
    """ConsumerProtocolSubscription v3: topics [foo], userData null, ownedPartitions [foo [0]],
    generationId 0, rackId "rack" (Kafka's DumpLogSegmentsTest)."""
    return (struct.pack(">hi", 3, 1) + string("foo") + blob(None) + struct.pack(">i", 1) + string("foo")
            + struct.pack(">ii", 1, 0) + struct.pack(">i", 0) + string("rack"))


def assignment_v3() -> bytes:
    return struct.pack(">hi", 3, 1) + string("foo") + struct.pack(">ii", 1, 0) + blob(None)


def group_value_v4(subscription: bytes, assignment: bytes) -> bytes:
    """GroupMetadataValue v4 (flexible) with one member, as Kafka's DumpLogSegmentsTest builds it."""
    member = (compact_string("member") + compact_string("instance") + compact_string("client")
              + compact_string("host") + struct.pack(">ii", 1000, 100) + compact_bytes(subscription)
              + compact_bytes(assignment) + b"\x00")
    return (struct.pack(">h", 4) + compact_string("consumer") + struct.pack(">i", 10) + compact_string("range")
            + compact_string("member") + struct.pack(">q", -1) + uvarint(2) + member + b"\x00")


def test_group_metadata_as_kafkas_test_expects():
    key = struct.pack(">h", 2) + string("group")
    k, v = offsets_record(key, group_value_v4(subscription_v3(), assignment_v3()))
    compact = lambda x: json.dumps(x, separators=(",", ":"))  # noqa: E731
    assert compact(k) == '{"type":"2","data":{"group":"group"}}'
    assert compact(v) == (
        '{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
        '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
        '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
        '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{"topics":["foo"],'
        '"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":'
        '[{"topic":"foo","partitions":[0]}],"userData":null}}]}}')
    # Blobs that do not parse stay base64, as Kafka keeps them.
    _, v = offsets_record(key, group_value_v4(b"Subscription", b"Assignment"))
    member = v["data"]["members"][0]
    assert (member["subscription"], member["assignment"]) == ("U3Vic2NyaXB0aW9u", "QXNzaWdubWVudA==")


def test_group_metadata_v0_has_no_later_fields():
    value = (struct.pack(">h", 0) + string("consumer") + struct.pack(">i", 1) + string("range") + string("m")
             + struct.pack(">i", 1) + string("m") + string("c") + string("/h") + struct.pack(">i", 30000)
             + blob(struct.pack(">hi", 0, 1) + string("t") + blob(b"u")) + blob(b""))
    _, v = offsets_record(struct.pack(">h", 2) + string("g"), value)
    assert v["data"] == {"protocolType": "consumer", "generation": 1, "protocol": "range", "leader": "m",
                         "members": [{"memberId": "m", "clientId": "c", "clientHost": "/h", "sessionTimeout": 30000,
                                      "subscription": {"topics": ["t"], "userData": "dQ=="}, "assignment": ""}]}


def group_key(record_type: int, group: str, member: str | None = None) -> bytes:
    return struct.pack(">h", record_type) + string(group) + (b"" if member is None else string(member))


TID = uuid.UUID(int=99).bytes


def topic_partitions(*ps: int) -> bytes:
    return TID + uvarint(len(ps) + 1) + b"".join(struct.pack(">i", p) for p in ps) + b"\x00"


@pytest.mark.parametrize("record_type, member, value, data", [
    (3, None, struct.pack(">hi", 0, 10) + b"\x00", {"epoch": 10}),
    (4, None, struct.pack(">h", 0) + uvarint(2) + TID + compact_string("t") + struct.pack(">i", 2)
     + uvarint(2) + struct.pack(">i", 0) + uvarint(2) + compact_string("r1") + b"\x00" + b"\x00" + b"\x00",
     {"topics": [{"topicId": b64url(TID), "topicName": "t", "numPartitions": 2,
                  "partitionMetadata": [{"partition": 0, "racks": ["r1"]}]}]}),
    (5, "m", struct.pack(">h", 0) + uvarint(0) + compact_string("rack") + compact_string("c") + compact_string("h")
     + uvarint(2) + compact_string("t") + uvarint(0) + struct.pack(">i", 5000) + compact_string("uniform") + b"\x00",
     {"instanceId": None, "rackId": "rack", "clientId": "c", "clientHost": "h", "subscribedTopicNames": ["t"],
      "subscribedTopicRegex": None, "rebalanceTimeoutMs": 5000, "serverAssignor": "uniform"}),
    (6, None, struct.pack(">hi", 0, 4) + b"\x00", {"assignmentEpoch": 4}),
    (7, "m", struct.pack(">h", 0) + uvarint(2) + topic_partitions(0, 1) + b"\x00",
     {"topicPartitions": [{"topicId": b64url(TID), "partitions": [0, 1]}]}),
    (8, "m", struct.pack(">hiib", 0, 3, 2, 0) + uvarint(2) + topic_partitions(1) + uvarint(1) + b"\x00",
     {"memberEpoch": 3, "previousMemberEpoch": 2, "state": 0,
      "assignedPartitions": [{"topicId": b64url(TID), "partitions": [1]}], "partitionsPendingRevocation": []}),
    (11, None, struct.pack(">hi", 0, 6) + b"\x00", {"epoch": 6}),
    (16, "^t.*", struct.pack(">h", 0) + uvarint(2) + compact_string("t1") + struct.pack(">qq", 2, 99) + b"\x00",
     {"topics": ["t1"], "version": 2, "timestamp": 99}),
])
def test_kip848_share_and_regex_records(record_type, member, value, data):
    key, payload = offsets_record(group_key(record_type, "g", member), value)
    expected_key = {"groupId": "g"}
    if member is not None:
        expected_key["regex" if record_type == 16 else "memberId"] = member
    assert key == {"type": str(record_type), "data": expected_key}
    assert payload == {"version": "0", "data": data}
    assert offsets_record(group_key(record_type, "g", member), None)[1] == "<DELETE>"


def test_classic_member_metadata_tag_as_kafka_writes_it():
    classic = struct.pack(">i", 45000) + uvarint(2) + compact_string("range") + compact_bytes(b"\x00\x01") + b"\x00" \
        + b"\x00"
    value = (struct.pack(">h", 0) + uvarint(0) + uvarint(0) + compact_string("c") + compact_string("h") + uvarint(1)
             + uvarint(0) + struct.pack(">i", 5000) + uvarint(0))
    expected = {"sessionTimeoutMs": 45000, "supportedProtocols": [{"name": "range", "metadata": "AAE="}]}
    for payload in (b"\x01" + classic, classic):  # Kafka's presence byte first; logstore's writer omits it
        tagged = value + uvarint(1) + uvarint(0) + uvarint(len(payload)) + payload
        _, v = offsets_record(group_key(5, "g", "m"), tagged)
        assert v["data"]["classicMemberMetadata"] == expected


def test_unknown_and_broken_offsets_records():
    with pytest.raises(UnknownRecordType) as info:
        offsets_record(struct.pack(">h", 17) + string("g"), b"\x00\x00")
    assert info.value.record_type == 17
    with pytest.raises(CorruptRecordError):
        offsets_record(offset_key(1, "g", "t", 0), struct.pack(">hq", 3, 5))   # truncated
    with pytest.raises(CorruptRecordError):
        offsets_record(None, b"")
    with pytest.raises(CorruptRecordError):
        offsets_record(group_key(3, "g"), struct.pack(">hi", 1, 10) + b"\x00")  # value version 1


def txn_value_v1(previous: int, next_: int, client_version: int) -> bytes:
    tags = []
    if previous != -1:
        tags.append(uvarint(0) + uvarint(8) + struct.pack(">q", previous))
    if next_ != -1:
        tags.append(uvarint(1) + uvarint(8) + struct.pack(">q", next_))
    if client_version:
        tags.append(uvarint(2) + uvarint(2) + struct.pack(">h", client_version))
    return (struct.pack(">hqhib", 1, 42, 3, 60000, PREPARE_COMMIT) + uvarint(2) + compact_string("t")
            + uvarint(3) + struct.pack(">ii", 0, 2) + b"\x00" + struct.pack(">qq", 10, 5) + uvarint(len(tags))
            + b"".join(tags))


def test_transaction_records():
    key = struct.pack(">h", 0) + string("tx")
    v0 = struct.pack(">hqhib", 0, 42, 3, 60000, 0) + struct.pack(">i", -1) + struct.pack(">qq", 10, 5)
    k, p = transaction_record(key, v0)
    assert k == {"type": "0", "data": {"transactionalId": "tx"}}
    assert p == {"version": "0", "data": {"producerId": 42, "producerEpoch": 3, "transactionTimeoutMs": 60000,
                                          "transactionStatus": 0, "transactionPartitions": None,
                                          "transactionLastUpdateTimestampMs": 10, "transactionStartTimestampMs": 5}}
    _, p = transaction_record(key, txn_value_v1(41, -1, 2))
    assert list(p["data"]) == ["producerId", "previousProducerId", "producerEpoch", "transactionTimeoutMs",
                               "transactionStatus", "transactionPartitions", "transactionLastUpdateTimestampMs",
                               "transactionStartTimestampMs", "clientTransactionVersion"]
    assert p["data"]["transactionPartitions"] == [{"topic": "t", "partitionIds": [0, 2]}]
    assert (p["data"]["previousProducerId"], p["data"]["clientTransactionVersion"]) == (41, 2)
    _, p = transaction_record(key, txn_value_v1(-1, -1, 0))
    assert "previousProducerId" not in p["data"] and "clientTransactionVersion" not in p["data"]
    assert transaction_record(key, None)[1] == "<DELETE>"
    with pytest.raises(UnknownRecordType):
        transaction_record(struct.pack(">h", 1) + string("tx"), v0)


# ---------------------------------------------------------------------------
# Kafka's own log dirs


def real_kafka_dirs() -> list[Path]:
    import kafka_dirs
    return kafka_dirs.fixture_dirs()


@pytest.mark.parametrize("log_dir", real_kafka_dirs(), ids=lambda p: p.name)
def test_every_file_kafka_wrote_dumps_and_offsets_match_the_oracle(log_dir):
    import kafka_dirs
    dump_every_file(log_dir, formats=((),))   # JSON: the offsets partitions below
    segments = [path for partition in kafka_dirs.offsets_partitions(log_dir)
                for path in kafka_dirs.segment_files(partition)]
    docs = []
    if segments:
        result = run_dump("--json", "--offsets-decoder", *segments)
        assert result.returncode == 0, result.stderr[-4000:]
        docs = json_docs(result)
    assert fold_offsets(docs) == kafka_dirs.committed_offsets(log_dir)
