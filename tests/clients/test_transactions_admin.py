"""DescribeTransactions, ListTransactions, DescribeProducers and `logstore transactions`, with real producers.

The scene, on the module's broker: confluent-kafka transactional producers
leave one transaction open over partitions 0 and 2 (`open`), one committed
(`committed`), one aborted (`aborted`), and one id only initialised
(`empty`). kafka-python's KafkaAdminClient asks the three APIs what it can
(ListTransactions v0-2, DescribeProducers, DescribeTransactions);
logstore's own admin client asks what kafka-python hides (unknown state
filters, a bad pattern, per-row errors). The CLI runs as a subprocess. A
hanging transaction, which no client can make against a broker that checks
KIP-890's rule, is written into a stopped broker's partition with the
storage library: a transactional batch from a producer no coordinator knows.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic
from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import UnknownTopicOrPartitionError
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1.request import ListTransactionsRequest as ListTransactionsV1
from kio.schema.list_transactions.v2.request import ListTransactionsRequest as ListTransactionsV2
from kio.static.primitive import i32, i64

import logstore
from broker_process import free_port
from logstore.broker.admin_client import AdminClient

TIMEOUT = 30.0  # s: a bound on any single wait
TOPIC = "txn-admin"
OPEN_TIMEOUT_MS = 900_000
LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions"]
PRODUCER_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset"]
HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)"]


def now_ms() -> int:
    """This machine's clock, in ms since the epoch (the broker's too: it runs here)."""
    return int(time.time() * 1000)


def create_topic(broker, topic: str, partitions: int) -> None:
    """Create `topic` through confluent-kafka's admin client."""
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=TIMEOUT)
    assert futures[topic].result(TIMEOUT) is None


class Scene:
    """The transactions the module's tests look at, and what their producers were told."""

    def __init__(self, broker):
        self.broker = broker
        self.ids = {name: f"admin-{name}" for name in ("open", "committed", "aborted", "empty")}
        self.offsets: dict[str, list[tuple[int, int]]] = {name: [] for name in self.ids}
        self.producers: dict[str, Producer] = {}

    def producer(self, name: str, **config) -> Producer:
        """A transactional producer for the id `name`, initialised."""
        p = Producer({"bootstrap.servers": self.broker.bootstrap, "transactional.id": self.ids[name], **config})
        p.init_transactions(TIMEOUT)
        self.producers[name] = p
        return p

    def send(self, name: str, partitions: list[int]) -> None:
        """One record to each partition listed, in order, all delivered; their offsets are kept."""
        p = self.producers[name]

        def delivered(err, msg):
            assert err is None, err
            self.offsets[name].append((msg.partition(), msg.offset()))
        for i, partition in enumerate(partitions):
            p.produce(TOPIC, value=f"{name}-{i}".encode(), partition=partition, on_delivery=delivered)
        assert p.flush(TIMEOUT) == 0

    def first_offset(self, name: str, partition: int) -> int:
        """The offset of the first record `name` wrote to `partition`."""
        return min(o for p, o in self.offsets[name] if p == partition)


@pytest.fixture(scope="module")
def scene(broker):
    """Open, committed, aborted and empty transactional ids on the module's broker."""
    create_topic(broker, TOPIC, 3)
    s = Scene(broker)
    s.producer("empty")
    committed = s.producer("committed")
    committed.begin_transaction()
    s.send("committed", [0, 0, 1])
    committed.commit_transaction(TIMEOUT)
    aborted = s.producer("aborted")
    aborted.begin_transaction()
    s.send("aborted", [1])
    aborted.abort_transaction(TIMEOUT)
    opened = s.producer("open", **{"transaction.timeout.ms": OPEN_TIMEOUT_MS})
    s.open_begun_ms = now_ms()
    opened.begin_transaction()
    s.send("open", [0, 2, 0, 2, 0])
    s.open_sent_ms = now_ms()
    yield s
    opened.abort_transaction(TIMEOUT)


@pytest.fixture(scope="module")
def admin(broker):
    """kafka-python's admin client on the module's broker."""
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="txn-admin-test",
                              request_timeout_ms=int(TIMEOUT * 1000))
    yield client
    client.close()


def listed(admin, **filters) -> dict[str, tuple[int, str]]:
    """kafka-python's ListTransactions: {transactional id: (producer id, state)} of this module's ids."""
    (rows,) = admin.list_transactions(**filters).values()
    return {r.transactional_id: (r.producer_id, r.state.value) for r in rows if r.transactional_id.startswith("admin-")}


def producer_ids(admin) -> dict[str, int]:
    """{transactional id: producer id} of this module's ids."""
    return {txn_id: pid for txn_id, (pid, _) in listed(admin).items()}


def run_cli(broker_or_address, *args: str) -> subprocess.CompletedProcess:
    """`python -m logstore transactions --bootstrap-server ... args`, its output captured."""
    address = getattr(broker_or_address, "bootstrap", broker_or_address)
    return subprocess.run([sys.executable, "-m", "logstore", "transactions", "--bootstrap-server", address, *args],
                          capture_output=True, text=True, timeout=TIMEOUT)


def table(stdout: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of one of Kafka's tables (cells padded, tab-separated)."""
    lines = stdout.splitlines()
    return lines[0].split(), [[cell.strip() for cell in line.split("\t")] for line in lines[1:]]


# -- ListTransactions ---------------------------------------------------------------------------------------

def test_list_transactions_shows_each_id_with_its_producer_and_state(scene, admin):
    rows = listed(admin)
    assert {t: state for t, (_, state) in rows.items()} == {
        scene.ids["open"]: "Ongoing", scene.ids["committed"]: "CompleteCommit",
        scene.ids["aborted"]: "CompleteAbort", scene.ids["empty"]: "Empty"}
    assert len({pid for pid, _ in rows.values()}) == 4, "each id has its own producer id"


def test_list_transactions_filters_by_state_and_producer_id(scene, admin):
    ids = scene.ids
    assert set(listed(admin, state_filters=["Ongoing"])) == {ids["open"]}
    assert set(listed(admin, state_filters=["CompleteCommit", "CompleteAbort"])) == {ids["committed"], ids["aborted"]}
    pids = producer_ids(admin)
    assert set(listed(admin, producer_id_filters=[pids[ids["committed"]]])) == {ids["committed"]}
    assert listed(admin, state_filters=["Ongoing"], producer_id_filters=[pids[ids["committed"]]]) == {}


def test_list_transactions_duration_filter_lists_only_transactions_running_that_long(scene, admin):
    assert set(listed(admin, duration_filter_ms=0)) == {scene.ids["open"]}
    assert listed(admin, duration_filter_ms=3_600_000) == {}, "the open transaction began seconds ago"
    assert len(listed(admin, duration_filter_ms=-1)) == 4


def test_list_transactions_pattern_must_match_the_whole_id(scene, admin):
    ids = scene.ids
    assert set(listed(admin, transactional_id_pattern=r"admin-(open|empty)")) == {ids["open"], ids["empty"]}
    assert listed(admin, transactional_id_pattern="open") == {}, "a pattern matching part of an id does not list it"
    assert len(listed(admin, transactional_id_pattern="")) == 4, "an empty pattern does not filter"


def test_list_transactions_reports_unknown_states_and_refuses_a_bad_pattern(scene, broker):
    with AdminClient(broker.bootstrap) as client:
        response = client.request(ListTransactionsV1(state_filters=("Ongoing", "Bogus", "Bogus"),
                                                     producer_id_filters=(), duration_filter=i64(-1)))
        assert response.error_code == ErrorCode.none
        assert response.unknown_state_filters == ("Bogus",)
        assert [r.transactional_id for r in response.transaction_states] == [scene.ids["open"]]
        response = client.request(ListTransactionsV1(state_filters=("Bogus",), producer_id_filters=(),
                                                     duration_filter=i64(-1)))
        assert (response.unknown_state_filters, response.transaction_states) == (("Bogus",), ())
        response = client.request(ListTransactionsV2(state_filters=(), producer_id_filters=(),
                                                     duration_filter=i64(-1), transactional_id_pattern="admin-("))
        assert response.error_code == ErrorCode.invalid_regular_expression
        assert response.transaction_states == ()


# -- DescribeTransactions -----------------------------------------------------------------------------------

def test_describe_transactions_shows_state_timeout_start_and_partitions(scene, admin):
    (broker_id,) = admin.list_transactions()
    ids = scene.ids
    described = admin.describe_transactions([ids["open"], ids["committed"], ids["empty"]])
    pids = producer_ids(admin)
    opened = described[ids["open"]]
    assert opened.state.value == "Ongoing"
    assert opened.topic_partitions == {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 2)}
    assert opened.transaction_timeout_ms == OPEN_TIMEOUT_MS
    assert scene.open_begun_ms <= opened.transaction_start_time_ms <= scene.open_sent_ms
    assert (opened.producer_id, opened.producer_epoch, opened.coordinator_id) == (pids[ids["open"]], 0, broker_id)
    committed = described[ids["committed"]]
    assert (committed.state.value, committed.topic_partitions) == ("CompleteCommit", set())
    assert 0 < committed.transaction_start_time_ms < scene.open_begun_ms, "the start of its last transaction"
    empty = described[ids["empty"]]
    assert (empty.state.value, empty.topic_partitions, empty.transaction_start_time_ms) == ("Empty", set(), -1)


def test_describe_transactions_answers_each_id_in_order_with_its_error(scene, broker):
    with AdminClient(broker.bootstrap) as client:
        response = client.request(DescribeTransactionsRequest(
            transactional_ids=("admin-no-such-id", "", scene.ids["open"], "admin-no-such-id")))
    rows = [(r.transactional_id, r.error_code) for r in response.transaction_states]
    assert rows == [("admin-no-such-id", ErrorCode.transactional_id_not_found), ("", ErrorCode.invalid_request),
                    (scene.ids["open"], ErrorCode.none), ("admin-no-such-id", ErrorCode.transactional_id_not_found)]
    opened = response.transaction_states[2]
    assert [(t.topic, t.partitions) for t in opened.topics] == [(TOPIC, (0, 2))]


# -- DescribeProducers --------------------------------------------------------------------------------------

def test_describe_producers_shows_open_and_ended_transactions(scene, admin):
    pids = producer_ids(admin)
    ids = scene.ids
    found = admin.describe_producers([TopicPartition(TOPIC, p) for p in range(3)])
    by_pid = {tp.partition: {s.producer_id: s for s in state.active_producers} for tp, state in found.items()}
    assert set(by_pid[0]) == {pids[ids["open"]], pids[ids["committed"]]}
    assert set(by_pid[1]) == {pids[ids["committed"]], pids[ids["aborted"]]}
    assert set(by_pid[2]) == {pids[ids["open"]]}
    opened = by_pid[0][pids[ids["open"]]]
    assert opened.current_transaction_start_offset == scene.first_offset("open", 0)
    assert (opened.producer_epoch, opened.last_sequence, opened.coordinator_epoch) == (0, 2, -1), \
        "three records sent to partition 0, no marker yet"
    assert scene.open_begun_ms <= opened.last_timestamp <= scene.open_sent_ms
    assert by_pid[2][pids[ids["open"]]].current_transaction_start_offset == scene.first_offset("open", 2)
    committed = by_pid[0][pids[ids["committed"]]]
    assert (committed.current_transaction_start_offset, committed.last_sequence, committed.coordinator_epoch) \
        == (-1, 1, 0), "its marker ended the transaction"
    aborted = by_pid[1][pids[ids["aborted"]]]
    assert (aborted.current_transaction_start_offset, aborted.last_sequence) == (-1, 0)


def test_describe_producers_of_an_unknown_partition_is_an_error(scene, admin, broker):
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_producers([TopicPartition(TOPIC, 7)], broker_id=next(iter(admin.list_transactions())))
    with AdminClient(broker.bootstrap) as client:
        response = client.request(DescribeProducersRequest(topics=(
            TopicRequest(name=TOPIC, partition_indexes=(i32(2), i32(99))),
            TopicRequest(name="admin-no-such-topic", partition_indexes=(i32(0),)),
            TopicRequest(name="bad/name", partition_indexes=(i32(0),)))))
    codes = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
    assert codes == {(TOPIC, 2): ErrorCode.none, (TOPIC, 99): ErrorCode.unknown_topic_or_partition,
                     ("admin-no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
                     ("bad/name", 0): ErrorCode.invalid_topic_exception}
    (rows,) = [p.active_producers for t in response.topics for p in t.partitions if p.partition_index == 2]
    assert [r.current_txn_start_offset for r in rows] == [scene.first_offset("open", 2)]


# -- the CLI ------------------------------------------------------------------------------------------------

def test_the_coordinators_internal_topics_cannot_be_deleted(scene, broker):
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    for name, future in admin.delete_topics(["__transaction_state"], operation_timeout=10).items():
        with pytest.raises(Exception) as caught:
            future.result()
        assert caught.value.args[0].name() == "INVALID_REQUEST", name
    assert (broker.data_dir / "__transaction_state-0").is_dir()


def test_cli_list_prints_kafkas_table_and_json(scene, admin, broker):
    pids = producer_ids(admin)
    (broker_id,) = admin.list_transactions()
    done = run_cli(broker, "list")
    assert (done.returncode, done.stderr) == (0, "")
    header, rows = table(done.stdout)
    assert header == LIST_HEADERS
    mine = {r[0]: r[1:] for r in rows if r[0].startswith("admin-")}
    states = {"open": "Ongoing", "committed": "CompleteCommit", "aborted": "CompleteAbort", "empty": "Empty"}
    assert mine == {scene.ids[n]: [str(broker_id), str(pids[scene.ids[n]]), s] for n, s in states.items()}
    done = run_cli(broker, "list", "--state", "Ongoing", "--producer-id", str(pids[scene.ids["open"]]), "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout) == {"unknownStateFilters": [], "transactions": [
        {"transactionalId": scene.ids["open"], "coordinatorId": broker_id, "producerId": pids[scene.ids["open"]],
         "transactionState": "Ongoing"}]}
    done = run_cli(broker, "list", "--duration-filter", "3600000")
    assert (done.returncode, table(done.stdout)) == (0, (LIST_HEADERS, []))


def test_cli_list_says_which_states_the_broker_does_not_know(scene, broker):
    done = run_cli(broker, "list", "--state", "Ongoing", "--state", "Hanging")
    assert done.returncode == 0
    assert "Hanging" in done.stderr and "Ongoing" not in done.stderr
    assert [r[0] for r in table(done.stdout)[1]] == [scene.ids["open"]]


def test_cli_describe_prints_the_transaction(scene, admin, broker):
    pids = producer_ids(admin)
    done = run_cli(broker, "describe", "--transactional-id", scene.ids["open"])
    assert (done.returncode, done.stderr) == (0, "")
    header, (row,) = table(done.stdout)
    assert header == DESCRIBE_HEADERS
    cells = dict(zip(header, row))
    assert (cells["TransactionalId"], cells["ProducerId"], cells["ProducerEpoch"], cells["TransactionState"],
            cells["TransactionTimeoutMs"], cells["TopicPartitions"]) == (
        scene.ids["open"], str(pids[scene.ids["open"]]), "0", "Ongoing", str(OPEN_TIMEOUT_MS),
        f"{TOPIC}-0,{TOPIC}-2")
    assert scene.open_begun_ms <= int(cells["CurrentTransactionStartTimeMs"]) <= scene.open_sent_ms
    assert int(cells["TransactionDurationMs"]) >= 0
    done = run_cli(broker, "describe", "--transactional-id", scene.ids["empty"], "--json")
    assert done.returncode == 0
    described = json.loads(done.stdout)
    assert (described["transactionState"], described["currentTransactionStartTimeMs"],
            described["transactionDurationMs"], described["topicPartitions"]) == ("Empty", None, None, [])


def test_cli_describe_of_an_unknown_id_fails_with_the_brokers_error(scene, broker):
    done = run_cli(broker, "describe", "--transactional-id", "admin-no-such-id")
    assert (done.returncode, done.stdout) == (1, "")
    assert "admin-no-such-id" in done.stderr and "TRANSACTIONAL_ID_NOT_FOUND" in done.stderr


def test_cli_describe_producers_prints_each_producer(scene, admin, broker):
    pids = producer_ids(admin)
    done = run_cli(broker, "describe-producers", "--topic", TOPIC, "--partition", "0")
    assert (done.returncode, done.stderr) == (0, "")
    header, rows = table(done.stdout)
    assert header == PRODUCER_HEADERS
    by_pid = {int(r[0]): r for r in rows}
    assert by_pid[pids[scene.ids["open"]]][1:4] == ["0", "-1", "2"]
    assert by_pid[pids[scene.ids["open"]]][5] == str(scene.first_offset("open", 0))
    assert by_pid[pids[scene.ids["committed"]]][5] == "None"
    done = run_cli(broker, "describe-producers", "--topic", TOPIC, "--partition", "2", "--json")
    assert json.loads(done.stdout)["activeProducers"][0]["currentTransactionStartOffset"] == \
        scene.first_offset("open", 2)
    done = run_cli(broker, "describe-producers", "--topic", TOPIC, "--partition", "9")
    assert done.returncode == 1
    assert f"{TOPIC}-9" in done.stderr and "UNKNOWN_TOPIC_OR_PARTITION" in done.stderr


def test_cli_find_hanging_leaves_out_transactions_their_coordinator_holds(scene, broker):
    # The open transaction is a candidate (open, last write older than 0 minutes) ...
    producers = json.loads(run_cli(broker, "describe-producers", "--topic", TOPIC, "--partition", "0",
                                   "--json").stdout)["activeProducers"]
    assert any(p["currentTransactionStartOffset"] is not None and p["lastTimestamp"] < now_ms() for p in producers)
    # ... but its id is Ongoing with this partition, so the coordinator will end it.
    for scope in (["--topic", TOPIC], ["--topic", TOPIC, "--partition", "0"], []):
        done = run_cli(broker, "find-hanging", "--max-transaction-timeout", "0", *scope)
        assert (done.returncode, done.stderr, table(done.stdout)) == (0, "", (HANGING_HEADERS, [])), scope


def test_cli_find_hanging_reports_a_transaction_no_coordinator_knows(start_broker):
    b = start_broker("transaction.state.log.num.partitions=5")
    create_topic(b, "hangs", 2)
    b.stop()
    written = now_ms() - 3_600_000  # its producer last wrote an hour ago
    with logstore.open(str(b.data_dir)) as store:
        partition = store.log("hangs", 1)
        partition.append_records([b"before"], timestamps=[written])
        result = partition.append_records([b"x", b"y"], timestamps=[written, written], producer_id=424242,
                                          producer_epoch=3, base_sequence=0, transactional=True)
    b.start()
    expected = ["hangs", "1", "424242", "3", "-1", str(result.first_offset), str(written)]
    for scope in (["--topic", "hangs"], ["--topic", "hangs", "--partition", "1"], []):
        done = run_cli(b, "find-hanging", *scope)
        assert (done.returncode, done.stderr) == (0, ""), scope
        header, (row,) = table(done.stdout)
        assert header == HANGING_HEADERS
        assert row[:7] == expected and int(row[7]) >= 60, scope
    (found,) = json.loads(run_cli(b, "find-hanging", "--json").stdout)["hangingTransactions"]
    assert (found["producerId"], found["startOffset"], found["lastTimestamp"]) == (424242, result.first_offset,
                                                                                   written)
    done = run_cli(b, "find-hanging", "--max-transaction-timeout", "120")
    assert table(done.stdout) == (HANGING_HEADERS, []), "open for an hour: not past a two-hour timeout"
    done = run_cli(b, "find-hanging", "--topic", "hangs", "--partition", "0")
    assert table(done.stdout) == (HANGING_HEADERS, [])


@pytest.mark.parametrize("args, message", [
    (["list", "--bootstrap-server", "no-port"], "'no-port' is not host:port"),
    (["--bootstrap-server", "{}", "describe", "--transactional-id", "x", "--bogus"], "unrecognized arguments: --bogus"),
    (["--bootstrap-server", "{}", "describe"], "the following arguments are required: --transactional-id"),
    (["--bootstrap-server", "{}", "find-hanging", "--partition", "0"], "--partition requires --topic"),
    (["--bootstrap-server", "{}", "find-hanging", "--max-transaction-timeout", "-1"], "must be >= 0"),
    (["--bootstrap-server", "{}", "describe-producers", "--topic", "t", "--partition", "x"], "invalid int value"),
    (["--bootstrap-server", "{}", "describe-producers", "--topic", "t", "--partition", "-1"],
     "--partition must be >= 0"),
    (["--bootstrap-server", "{}", "abort"], "abort: Missing required argument --topic (or give --transactional-id)"),
    (["--bootstrap-server", "{}", "cancel"], "invalid choice"),
    (["--bootstrap-server", "no-port", "list"], "'no-port' is not host:port"),
])
def test_cli_bad_arguments_exit_2_with_a_message(broker, args, message):
    args = [a.format(broker.bootstrap) for a in args]
    done = subprocess.run([sys.executable, "-m", "logstore", "transactions", *args], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert (done.returncode, done.stdout) == (2, "")
    assert message in done.stderr


def test_cli_without_a_broker_exits_2():
    address = f"127.0.0.1:{free_port()}"
    done = run_cli(address, "list")
    assert (done.returncode, done.stdout) == (2, "")
    assert f"no broker at {address}" in done.stderr and "refused" in done.stderr
