"""The exactly-once copier, the fleet that runs it under SIGKILLs, and the check of what it wrote.

`python eos_copier.py copy ...` is one copier process: a confluent-kafka
consumer in a group (read_committed, no auto commit) and a transactional
producer whose transactional.id belongs to the copier's slot, so that a
restarted slot fences whatever its killed predecessor left open. Each record
is copied as value + b"!" under the same key, with its input partition and
offset in a "src" header; the consumer's positions go into the transaction
(send_offsets_to_transaction) and it commits every few records. Rebalances
are handled as librdkafka's examples/transactions.c does (commit on revoke,
abort on a lost assignment), with one difference: a failed commit on revoke
also rewinds, since with cooperative-sticky the partitions that stay would
otherwise resume after records whose output was just aborted. The copier
prints one JSON line per event on stdout and ends at EOF on stdin.

The test side: `produce_input` writes the input (keyed, with aborted
transactions between the records, which a read_committed copier must not
copy), `CopierFleet` starts, kills, stops (a zombie) and restarts copier
processes and follows their events, `read_output` reads the output topic back
and `check_copy` proves each input record is there exactly once, in its key's
order.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

SESSION_TIMEOUT_MS = 2500
TRANSACTION_TIMEOUT_MS = 4000
# Broker settings that make a takeover quick: a killed copier's session and its open
# transaction both end within seconds.
BROKER_SETTINGS = ("group.min.session.timeout.ms=1000", "group.initial.rebalance.delay.ms=0",
                   "transaction.abort.timed.out.transaction.cleanup.interval.ms=500")
# metadata.recovery.strategy=none: with librdkafka 2.16's default (rebootstrap), a broker restart (all
# brokers down at once) decommissions the broker object, and a send_offsets_to_transaction in flight then
# never completes (its TxnOffsetCommit is never sent); reconnecting to the same broker is what is wanted.
_BACKOFF = {"reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 250, "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 250, "metadata.recovery.strategy": "none"}


# -- the copier (a subprocess) --------------------------------------------------------------------

def _emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _log(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


class Copier:
    """One copier: its consumer, its transactional producer, the transaction in hand.

    Single-threaded: everything, the rebalance callbacks included, runs on
    the thread that calls `run` (callbacks run inside consumer.poll).
    `pending` counts the records produced in the open transaction.
    """

    CALL_TIMEOUT = 10.0  # s, per transactional call
    GIVE_UP = 30.0       # s of retriable errors before an outcome counts as unknown

    def __init__(self, args):
        self.args = args
        self.producer_config = {"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
                                "transaction.timeout.ms": args.transaction_timeout_ms, "linger.ms": 5, **_BACKOFF}
        if os.environ.get("COPIER_DEBUG"):
            self.producer_config["debug"] = os.environ["COPIER_DEBUG"]
        self.producer: Producer | None = None
        self.instances = 0
        self._renew()
        self.consumer = Consumer({
            "bootstrap.servers": args.bootstrap, "group.id": args.group, "isolation.level": "read_committed",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": False,
            "partition.assignment.strategy": args.strategy, "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": max(args.session_timeout_ms // 5, 100), "max.poll.interval.ms": 20000,
            # Small fetches (the input comes in small batches) interleave the partitions, so that a copier
            # taking partitions over gets to each of them soon.
            "fetch.wait.max.ms": 50, "max.partition.fetch.bytes": 1024, **_BACKOFF})
        self.consumer.subscribe([args.input], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        self.pending = 0
        self.delivered = 0  # records of the open transaction the broker acknowledged
        self.txn_started = time.monotonic()

    # transactional calls

    def _call(self, what: str, fn: Callable, *args) -> None:
        """`fn(*args)`, again while librdkafka calls its error retriable (commit and abort may be retried)."""
        deadline = time.monotonic() + self.GIVE_UP
        while True:
            try:
                return fn(*args)
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal() or err.txn_requires_abort() or not err.retriable() or time.monotonic() > deadline:
                    raise
                _log(f"{what}: {err}; again")

    def _renew(self) -> None:
        """A new producer instance of the slot's id: init_transactions ends what the old one left open."""
        if self.producer is not None:
            _close(self.producer)
        deadline = time.monotonic() + 120  # s: through broker restarts
        while True:
            self.producer = Producer(self.producer_config)
            self.instances += 1
            try:
                self.producer.init_transactions(self.CALL_TIMEOUT)
                break
            except KafkaException as exc:
                _log(f"init_transactions: {exc.args[0]}")
                if time.monotonic() > deadline:
                    raise
                _close(self.producer)

    def _begin(self) -> None:
        self.producer.begin_transaction()
        self.pending = self.delivered = 0
        self.txn_started = time.monotonic()

    def commit(self, why: str) -> bool:
        """Commit the open transaction with the consumer's positions; on failure abort (or renew) and rewind."""
        try:
            assignment = self.consumer.assignment()
            if not assignment:
                # Records without offsets to commit with them: only an abort keeps them once.
                raise KafkaException(KafkaError(KafkaError._STATE, "no assignment to commit", txn_requires_abort=True))
            positions = self.consumer.position(assignment)
            _emit("committing")
            self._call("send_offsets_to_transaction", self.producer.send_offsets_to_transaction, positions,
                       self.consumer.consumer_group_metadata(), self.CALL_TIMEOUT)
            self._call("commit_transaction", self.producer.commit_transaction, self.CALL_TIMEOUT)
        except KafkaException as exc:
            self._recover(exc.args[0], f"commit ({why})")
            return False
        _emit("committed", records=self.pending, why=why,
              offsets={tp.partition: tp.offset for tp in positions if tp.offset >= 0})
        self._begin()
        return True

    def _recover(self, err: KafkaError, where: str, rewind: bool = True) -> None:
        """End the open transaction after `err`: abort it if librdkafka allows, else renew; then rewind."""
        _log(f"{where}: {err} (fatal {err.fatal()}, abortable {err.txn_requires_abort()})")
        records, outcome = self.pending, "aborted"
        if err.txn_requires_abort() and not err.fatal():
            try:
                self._call("abort_transaction", self.producer.abort_transaction, self.CALL_TIMEOUT)
            except KafkaException as again:
                _log(f"abort_transaction: {again.args[0]}")
                self._renew()
                outcome, err = "renewed", again.args[0]
        else:
            self._renew()
            outcome = "renewed"
        _emit(outcome, records=records, where=where, error=str(err), instance=self.instances)
        if rewind:
            self._rewind()
        self._begin()

    def _rewind(self) -> None:
        """Seek every assigned partition back to its committed (stable) offset, where the output stops."""
        assignment = self.consumer.assignment()
        if not assignment:
            return
        deadline = time.monotonic() + 60
        while True:
            try:
                committed = self.consumer.committed(assignment, timeout=self.CALL_TIMEOUT)
                failed = [tp for tp in committed if tp.error is not None]
                if not failed:
                    break
                _log(f"committed(): {failed}")
            except KafkaException as exc:
                _log(f"committed(): {exc.args[0]}")
            if time.monotonic() > deadline:
                raise RuntimeError("could not read the committed offsets to rewind to")
        for tp in committed:
            tp.offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            try:
                self.consumer.seek(tp)
            except KafkaException as exc:
                # A partition whose fetch has not started yet will start at the committed offset anyway.
                if exc.args[0].code() not in (KafkaError._STATE, KafkaError._UNKNOWN_PARTITION):
                    raise
        _emit("rewound", offsets={tp.partition: tp.offset for tp in committed})

    # rebalance callbacks (inside consumer.poll; the client assigns/unassigns after they return)

    def _on_assign(self, consumer, partitions) -> None:
        _emit("assigned", partitions=sorted(tp.partition for tp in partitions), member=consumer.memberid())

    def _on_revoke(self, consumer, partitions) -> None:
        _emit("revoked", partitions=sorted(tp.partition for tp in partitions), member=consumer.memberid())
        if self.pending:
            self.commit("revoke")

    def _on_lost(self, consumer, partitions) -> None:
        _emit("lost", partitions=sorted(tp.partition for tp in partitions), member=consumer.memberid())
        if self.pending:
            self._recover(KafkaError(KafkaError._STATE, "assignment lost", txn_requires_abort=True), "lost",
                          rewind=False)

    # the loop

    def _copy(self, msg) -> None:
        """Produce the transformed record into the open transaction."""
        while True:
            try:
                self.producer.produce(self.args.output, key=msg.key(), value=msg.value() + b"!",
                                      headers=[("src", f"{msg.partition()}:{msg.offset()}".encode())],
                                      on_delivery=self._on_delivery)
                return
            except BufferError:
                self.producer.poll(0.05)

    def _on_delivery(self, err, msg) -> None:
        # Lets the test kill a copier while records of its open transaction are in the log.
        if err is None:
            self.delivered += 1
            _emit("delivered", pending=self.delivered)

    def run(self, stop: threading.Event) -> None:
        """Copy until `stop`, committing every `txn_records` records or `txn_ms`; then commit and leave."""
        self._begin()
        pause = 1.0 / self.args.rate if self.args.rate else 0.0
        while not stop.is_set():
            if self.pending and (self.pending >= self.args.txn_records
                                 or time.monotonic() - self.txn_started >= self.args.txn_ms / 1000):
                self.commit("batch")
            msg = self.consumer.poll(0.05)
            if msg is None:
                continue
            if msg.error():
                _log(f"consumer: {msg.error()}")
                continue
            try:
                self._copy(msg)
            except KafkaException as exc:
                self._recover(exc.args[0], "produce")
                continue
            self.pending += 1
            self.producer.poll(0)
            if pause:
                time.sleep(pause)  # the "work" of a transform, so that kills land mid-stream
        if self.pending:
            self.commit("stop")
        self.consumer.close()
        _close(self.producer)


def _close(p: Producer) -> None:
    try:
        p.close(0)
    except KafkaException:
        pass  # a client in a fatal state raises its error again on close; it is closed all the same


def _copy_main(args) -> None:
    stop = threading.Event()

    def wait_for_eof():
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    copier = Copier(args)
    _emit("started", transactional_id=args.transactional_id)
    copier.run(stop)
    _emit("stopped")


# -- the input ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Input:
    """What `produce_input` wrote: each copied record's (key, value) by (partition, offset); end offsets."""

    records: dict[tuple[int, int], tuple[bytes, bytes]]
    end_offsets: dict[int, int]


def input_record(i: int, keys: int) -> tuple[bytes, bytes]:
    """(key, value) of input record `i`: `keys` keys in turn, so that each key has records in order."""
    return f"k{i % keys}".encode(), f"r{i}".encode()


def produce_input(bootstrap: str, topic: str, count: int, partitions: int, keys: int = 97,
                  aborted_every: int = 250) -> Input:
    """`count` keyed records, with an aborted transaction (a record per partition) after every `aborted_every`
    except near the end, so that every partition ends with a copied record (its end offset is where the
    copiers' committed offset must arrive)."""
    delivered: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                      "batch.num.messages": 10})
    junk = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-input-junk"})
    junk.init_transactions(30)
    for i in range(count):
        key, value = input_record(i, keys)
        plain.produce(topic, key=key, value=value, on_delivery=on_delivery)
        if (i + 1) % aborted_every == 0 and i + 1 <= count - aborted_every:
            assert plain.flush(30) == 0
            junk.begin_transaction()
            for p in range(partitions):
                junk.produce(topic, key=b"junk", value=f"junk{i}".encode(), partition=p)
            assert junk.flush(30) == 0  # so that the aborted records do reach the log
            junk.abort_transaction(30)
        plain.poll(0)
    assert plain.flush(30) == 0
    junk.close(30)
    assert not errors, errors
    assert len(delivered) == count
    ends = {}
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-probe", "enable.auto.commit": False})
    try:
        for p in range(partitions):
            ends[p] = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
    finally:
        probe.close()
    last = {p: max(o for q, o in delivered if q == p) for p in range(partitions)}
    assert {p: o + 1 for p, o in last.items()} == ends, "a partition's input does not end with a copied record"
    return Input(delivered, ends)


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int, timeout: float = 10) -> dict[int, int]:
    """The group's committed offsets (stable: read_committed asks with require_stable), -1001 where none."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=timeout)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


# -- the fleet ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pause:
    """A SIGSTOP: how many events each slot had printed when every thread had stopped, and the stopped
    copier's transaction then: records of it in the log, and whether it had begun committing (then its
    offsets may have been accepted in its generation, and its commit may rightly succeed)."""

    marks: dict[int, int]
    holding: int
    committing: bool


def _readable(stream: IO[bytes]) -> bool:
    """Whether `stream` has bytes to read now; poll, as select() refuses descriptors past FD_SETSIZE (1024)."""
    poller = select.poll()
    poller.register(stream, select.POLLIN)
    return bool(poller.poll(0))


class CopierFleet:
    """Copier subprocesses by slot (slot i always uses transactional.id `<group>-<i>`), and their events.

    `assignment[slot]` follows the copier's assigned/revoked/lost events;
    `copied` counts the records of the transactions copiers reported committed.
    """

    def __init__(self, bootstrap: str, work: Path, group: str, input_topic: str, output_topic: str,
                 slots: int, options: tuple[str, ...] = ()):
        self.command = [sys.executable, __file__, "copy", "--bootstrap", bootstrap, "--group", group,
                        "--input", input_topic, "--output", output_topic, *options]
        self.group, self.work = group, work
        self.procs: dict[int, subprocess.Popen] = {}
        self.runs = {slot: 0 for slot in range(slots)}
        self.events: dict[int, list[dict]] = {slot: [] for slot in range(slots)}
        self.assignment: dict[int, set[int]] = {slot: set() for slot in range(slots)}
        self.open_records = {slot: 0 for slot in range(slots)}  # in the log, in the open transaction
        self.member: dict[int, str | None] = {slot: None for slot in range(slots)}  # as of its last assignment
        self._admin = AdminClient({"bootstrap.servers": bootstrap, **_BACKOFF})
        self.copied = 0
        self._partial: dict[int, bytes] = {}
        self._sel = selectors.DefaultSelector()
        for slot in range(slots):
            self.start(slot)

    def stderr(self, slot: int, run: int) -> Path:
        """Where run `run` (1, 2, ...) of `slot` writes its stderr (librdkafka's log and the copier's)."""
        return self.work / f"copier{slot}.{run}.stderr"

    def start(self, slot: int) -> None:
        """(Re)start the copier of `slot`."""
        assert slot not in self.procs, f"copier {slot} is running"
        self.runs[slot] += 1
        with open(self.stderr(slot, self.runs[slot]), "wb") as err:
            proc = subprocess.Popen([*self.command, "--transactional-id", f"{self.group}-{slot}"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        self.procs[slot] = proc
        self._partial[slot] = b""
        self._sel.register(proc.stdout, selectors.EVENT_READ, slot)

    def kill(self, slot: int) -> None:
        """SIGKILL the copier of `slot` (its events so far are kept)."""
        proc = self.procs.pop(slot)
        proc.kill()
        proc.wait()
        self._sel.unregister(proc.stdout)
        proc.stdout.close()
        proc.stdin.close()
        self.assignment[slot].clear()
        self.open_records[slot] = 0

    def pause(self, slot: int) -> Pause:
        """SIGSTOP the copier of `slot` (a zombie, once the group has moved on without it) and wait until
        every thread of it has stopped."""
        proc = self.procs[slot]
        proc.send_signal(signal.SIGSTOP)
        # The kernel reports a stop to the parent once the last thread has stopped.
        info = os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
        assert info.si_code == os.CLD_STOPPED, f"copier {slot} ended instead of stopping:\n{self.logs(slot)}"
        os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WNOHANG)  # taken, so that the next pause waits anew
        while _readable(proc.stdout) and self._take(slot, proc.stdout):
            pass  # everything it printed before it stopped
        ends = ("committing", "committed", "aborted", "renewed")
        last = [e["event"] for e in self.events[slot] if e["event"] in ends][-1:]
        return Pause({s: len(events) for s, events in self.events.items()},
                     self.open_records[slot], last == ["committing"])

    def pause_in_transaction(self, slot: int, timeout: float, tick: Callable[[], None] | None = None,
                             tries: int = 5) -> Pause:
        """`pause` once `slot` holds records of an open transaction in the log (unless none come within
        `timeout` s); when the stop lands inside its commit, again with its next transaction (`tries` times)."""
        for _ in range(tries):
            self.wait(lambda: self.open_records[slot] > 0, timeout, tick)
            pause = self.pause(slot)
            if not pause.committing:
                return pause
            self.resume(slot)
            self.wait(lambda: self.open_records[slot] == 0, timeout, tick)
        return self.pause(slot)

    def resume(self, slot: int) -> None:
        """SIGCONT: the zombie carries on with its transaction, which the broker must fence."""
        self.procs[slot].send_signal(signal.SIGCONT)

    def moved_on_without(self, slot: int) -> bool:
        """Whether the group is Stable in a generation without the member `slot` last joined as (asked of the
        broker: the copiers' own events may lag behind, a stopped one's most of all)."""
        try:
            description = self._admin.describe_consumer_groups([self.group])[self.group].result(10)
        except (KafkaException, TimeoutError):
            # The broker is restarting, or its crash point fired and it waits to be revived between asks.
            return False
        members = {m.member_id for m in description.members}
        return description.state == ConsumerGroupState.STABLE and self.member[slot] not in members

    def _apply(self, slot: int, event: dict) -> None:
        event["run"] = self.runs[slot]
        self.events[slot].append(event)
        kind = event["event"]
        if kind == "assigned":
            self.assignment[slot] |= set(event["partitions"])
            self.member[slot] = event["member"]
        elif kind in ("revoked", "lost"):
            self.assignment[slot] -= set(event["partitions"])
        elif kind == "committed":
            self.copied += event["records"]
        if kind == "delivered":
            self.open_records[slot] = event["pending"]
        elif kind in ("committed", "aborted", "renewed"):
            self.open_records[slot] = 0

    def _read(self, timeout: float) -> bool:
        """Take in the copiers' events for up to `timeout` s; False once no copier has output left."""
        if not self._sel.get_map():
            return False
        for key, _ in self._sel.select(timeout):
            self._take(key.data, key.fileobj)
        return True

    def _take(self, slot: int, pipe) -> bool:
        """Read what is in `slot`'s stdout and apply its events; False at its end."""
        chunk = os.read(pipe.fileno(), 65536)
        if not chunk:
            self._sel.unregister(pipe)
            return False
        *lines, self._partial[slot] = (self._partial[slot] + chunk).split(b"\n")
        for line in lines:
            self._apply(slot, json.loads(line))
        return True

    def wait(self, done: Callable[[], bool], timeout: float, tick: Callable[[], None] | None = None) -> bool:
        """Take in events until `done()` (asked every 0.2 s at most, after `tick()`) or `timeout` s; whether
        it came true. Every running copier must stay alive meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            if tick is not None:
                tick()
            if done():
                return True
            if time.monotonic() >= deadline:
                return False
            self._read(min(0.2, max(deadline - time.monotonic(), 0)))
            for slot, proc in self.procs.items():
                assert proc.poll() is None, f"copier {slot} exited with {proc.returncode}:\n{self.logs(slot)}"

    def wait_until(self, done: Callable[[], bool], what: str, timeout: float,
                   tick: Callable[[], None] | None = None) -> None:
        """`wait`, failing with the copiers' logs if `done()` did not come true in time."""
        assert self.wait(done, timeout, tick), f"{what}: not within {timeout} s\n{self.logs()}"

    def wait_copied(self, more: int, timeout: float) -> None:
        """Until copiers have reported `more` further records committed."""
        target = self.copied + more
        self.wait_until(lambda: self.copied >= target, f"{more} more records copied", timeout)

    def finish(self, timeout: float) -> None:
        """EOF on every copier's stdin: each commits what it holds, leaves the group and must exit 0."""
        for proc in self.procs.values():
            proc.stdin.close()
        deadline = time.monotonic() + timeout
        while self._read(max(deadline - time.monotonic(), 0)):
            assert time.monotonic() < deadline, f"copiers still running {timeout} s after EOF:\n{self.logs()}"
        for slot, proc in self.procs.items():
            assert proc.wait(max(deadline - time.monotonic(), 1)) == 0, \
                f"copier {slot} exited with {proc.returncode}:\n{self.logs(slot)}"
            assert not self._partial[slot], f"copier {slot} left half a line: {self._partial[slot]!r}"
            assert self.events[slot][-1]["event"] == "stopped", self.events[slot][-3:]
        self.procs.clear()

    def close(self) -> None:
        """Teardown: no copier outlives the test; every event is left in `copier<slot>.events` for a post-mortem."""
        for proc in self.procs.values():
            proc.kill()
            proc.wait()
        self._sel.close()
        for slot, events in self.events.items():
            (self.work / f"copier{slot}.events").write_text("".join(json.dumps(e) + "\n" for e in events))

    def count(self, kind: str) -> int:
        """How many events of `kind` all copiers printed."""
        return sum(1 for events in self.events.values() for e in events if e["event"] == kind)

    def logs(self, *slots: int) -> str:
        """Each copier's stderr and its latest events, for a failure message."""
        parts = []
        for slot in slots or self.runs:
            for run in range(1, self.runs[slot] + 1):
                events = [json.dumps(e) for e in self.events[slot]
                          if e["run"] == run and e["event"] not in ("delivered", "committing")]
                parts.append(f"--- copier {slot} run {run} (holds {sorted(self.assignment[slot])}):\n"
                             + self.stderr(slot, run).read_text(errors="replace")[-3000:] + "\n".join(events[-15:]))
        return "\n".join(parts)


# -- the output ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Copy:
    """One output record: where it is, and what the copier put in it."""

    partition: int
    offset: int
    key: bytes
    value: bytes
    src: tuple[int, int]  # input (partition, offset), from the "src" header


def read_output(bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 60) -> list[Copy]:
    """Every record of `topic`, up to a closing transaction committed into each partition now (not included);
    read_committed thus also waits until every transaction before it has ended."""
    closer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-closer"})
    closer.init_transactions(timeout)
    closer.begin_transaction()
    for p in range(partitions):
        closer.produce(topic, key=b"closer", value=b"closer", partition=p)
    closer.commit_transaction(timeout)
    closer.close(timeout)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": False, "fetch.wait.max.ms": 50})
    copies: list[Copy] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        waiting = set(range(partitions))
        deadline = time.monotonic() + timeout
        while waiting:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{isolation}: partitions {sorted(waiting)} did not reach the closer in {timeout} s"
            for m in c.consume(1000, min(remaining, 1.0)):
                assert m.error() is None, f"{isolation} reader: {m.error()}"
                if m.key() == b"closer":
                    waiting.discard(m.partition())
                    continue
                src = dict(m.headers() or ())["src"].decode().split(":")
                copies.append(Copy(m.partition(), m.offset(), m.key(), m.value(), (int(src[0]), int(src[1]))))
    finally:
        c.close()
    return copies


@dataclass
class CopySummary:
    """What `check_copy` counted."""

    copied: int = 0
    aborted_copies_in_log: int = 0  # seen read_uncommitted only: output of transactions that were aborted

    def __str__(self) -> str:
        return f"{self.copied} records copied once each, {self.aborted_copies_in_log} aborted copies in the log"


def check_copy(source: Input, committed: list[Copy], uncommitted: list[Copy]) -> CopySummary:
    """Prove the output read_committed holds each input record exactly once, transformed, in its key's order.

    Every copy must name an input record it carries (key kept, value + b"!");
    no input record may be missing or copied twice; per key, copies are in
    input order; read_uncommitted must hold every read_committed copy.
    """
    problems: list[str] = []
    times = Counter(c.src for c in committed)
    for c in committed:
        if c.src not in source.records:
            problems.append(f"{c}: no such input record (junk from an aborted input transaction?)")
        elif source.records[c.src] != (c.key, c.value[:-1]) or not c.value.endswith(b"!"):
            problems.append(f"{c}: the input there is {source.records[c.src]}")
    for src, n in sorted(times.items()):
        if n > 1:
            problems.append(f"input {src} {source.records.get(src)} copied {n} times")
    missing = sorted(set(source.records) - set(times))
    if missing:
        problems.append(f"{len(missing)} input records not copied, e.g. " +
                        ", ".join(f"{src} {source.records[src]}" for src in missing[:10]))
    by_key: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for c in sorted(committed, key=lambda c: (c.partition, c.offset)):
        by_key[c.key].append(c.src)
    for key, srcs in sorted(by_key.items()):
        if srcs != sorted(srcs, key=lambda s: (s[0], s[1])) or len({s[0] for s in srcs}) > 1:
            problems.append(f"key {key!r}: copies out of input order: {srcs[:20]}")
    kept = {(c.partition, c.offset) for c in uncommitted}
    lost = [c for c in committed if (c.partition, c.offset) not in kept]
    if lost:
        problems.append(f"read_uncommitted misses {len(lost)} read_committed copies, e.g. {lost[:3]}")
    assert not problems, f"{len(problems)} violations:\n" + "\n".join(problems[:30])
    return CopySummary(copied=len(committed), aborted_copies_in_log=len(uncommitted) - len(committed))


def main(argv=None) -> None:
    """`copy`: run one copier (see `Copier`) until EOF on stdin."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    copy = sub.add_parser("copy")
    copy.add_argument("--bootstrap", required=True)
    copy.add_argument("--group", required=True)
    copy.add_argument("--input", required=True)
    copy.add_argument("--output", required=True)
    copy.add_argument("--transactional-id", required=True)
    copy.add_argument("--strategy", default="cooperative-sticky", help="partition.assignment.strategy")
    copy.add_argument("--txn-records", type=int, default=25, help="commit after this many records")
    copy.add_argument("--txn-ms", type=int, default=200, help="or after this long (ms)")
    copy.add_argument("--rate", type=float, default=0.0, help="records/s at most (0: no limit)")
    copy.add_argument("--session-timeout-ms", type=int, default=SESSION_TIMEOUT_MS)
    copy.add_argument("--transaction-timeout-ms", type=int, default=TRANSACTION_TIMEOUT_MS)
    args = parser.parse_args(argv)
    _copy_main(args)


if __name__ == "__main__":
    main()
