"""A consumer-group member run as a subprocess: `python group_member.py CONFIG_JSON` (a MemberConfig).

It polls in a loop and writes reports on stdout, one JSON object a line ({"ev": "assignment" | "records" |
"committed" | "commit_failed" | "error" | "reply", ...}); it reads commands on stdin, one JSON object a
line ({"id": n, "op": "commit" | "committed" | "hold" | "ping" | "close", ...}), between polls. It exits
after "close" (the client leaves the group) or when its stdin closes (the test is gone). group_helpers'
MemberProcess is the other end.
"""
from __future__ import annotations

import json
import logging
import os
import selectors
import sys
import threading
import time

from group_helpers import POLL, Listener, MemberConfig, Record, group_consumer


class Member(Listener):
    """The loop around one client's consumer, and the positions it would commit.

    The client may call the listener methods from its own thread (kafka-python's IO thread, aiokafka's
    loop), so the positions and stdout are shared under one lock.
    """

    def __init__(self, config: MemberConfig):
        self._lock = threading.RLock()
        self.positions: dict[int, int] = {}   # partition -> offset after the last record consumed there
        self.holding = not config.commit_consumed   # commits nothing of its own once told to hold
        self.assigns = self.revokes = 0
        # When to commit again after the broker refused a commit (monotonic s), None when none is owed.
        self.retry_at: float | None = None
        self.retry_s = config.heartbeat_interval_ms / 1000
        self._reported: tuple | None = None
        self._stdin = b""
        self.consumer = group_consumer(config, self)

    def emit(self, **event) -> None:
        with self._lock:
            sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()

    # -- what the adapter reports ------------------------------------------------------------------

    def consumed(self, records: list[Record]) -> None:
        """Records a poll brought: reported before anything of them is committed."""
        if records:
            with self._lock:
                self.emit(ev="records", records=[list(r) for r in records])
                for r in records:
                    self.positions[r.partition] = r.offset + 1

    def revoking(self, partitions):
        with self._lock:
            offsets = {p: self.positions.pop(p) for p in partitions if p in self.positions}
            return {} if self.holding else offsets

    def lost(self, partitions):
        with self._lock:
            for p in partitions:
                self.positions.pop(p, None)

    def rebalanced(self, kind, partitions):
        with self._lock:
            if kind == "assign":
                self.assigns += 1
            else:
                self.revokes += 1

    def commit_done(self, offsets, error):
        if error is None:
            self.emit(ev="committed", offsets=offsets)
        else:
            self.emit(ev="commit_failed", offsets=offsets, error=f"{type(error).__name__}: {error}")

    def client_error(self, code, fatal, text):
        self.emit(ev="error", code=code, fatal=fatal, error=text)

    # -- the loop -------------------------------------------------------------------------------------

    def commit_positions(self) -> None:
        """Commit where the member is in every partition it consumed from (unless holding); after a refusal,
        commit again a heartbeat interval later, until one is taken."""
        with self._lock:
            offsets = {} if self.holding else dict(self.positions)
        self.retry_at = None
        if offsets:
            try:
                self.consumer.commit(offsets)
            except Exception as exc:  # noqa: BLE001 - reported, and made again (see run)
                self.commit_done(offsets, exc)
                self.retry_at = time.monotonic() + self.retry_s
            else:
                self.commit_done(offsets, None)

    def commit_owed(self) -> bool:
        """Whether a refused commit is due again: the broker refuses commits during a rebalance
        (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION) and librdkafka does not retry them, so an at-least-once
        application commits its positions again; without new records nothing else would."""
        return self.retry_at is not None and time.monotonic() >= self.retry_at

    def report_assignment(self) -> None:
        assignment = self.consumer.assignment()
        with self._lock:
            now = (tuple(assignment), self.assigns, self.revokes)
            if now != self._reported:
                self._reported = now
                self.emit(ev="assignment", partitions=assignment, assigns=self.assigns, revokes=self.revokes)

    def commands(self) -> list[dict] | None:
        """The commands that arrived on stdin (None once it closed)."""
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        self._stdin += chunk
        *lines, self._stdin = self._stdin.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def run(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(0, selectors.EVENT_READ)
            while True:
                for _ in sel.select(0):
                    commands = self.commands()
                    if commands is None:
                        return
                    for command in commands:
                        if not self.execute(command):
                            return
                if self.consumer.poll(POLL) or self.commit_owed():
                    self.commit_positions()
                self.report_assignment()

    def execute(self, command: dict) -> bool:
        """Run one command and answer it; False after "close"."""
        op, value, error = command["op"], None, None
        try:
            if op == "commit":
                offsets = {int(p): o for p, o in command["offsets"].items()}
                self.consumer.commit(offsets)
                self.commit_done(offsets, None)
            elif op == "committed":
                value = self.consumer.committed(command["partitions"])
            elif op == "hold":
                with self._lock:
                    self.holding = True
            elif op == "close":
                self.consumer.close()
            elif op != "ping":
                raise ValueError(f"unknown command {op!r}")
        except Exception as exc:  # noqa: BLE001 - the test sees it in the answer
            error = f"{type(exc).__name__}: {exc}"
        self.emit(ev="reply", id=command["id"], value=value, error=error)
        return op != "close"


if __name__ == "__main__":
    # The clients' own account of a rebalance goes to stderr, which a failing test shows.
    logging.basicConfig(level=os.environ.get("GROUP_MEMBER_LOG", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    Member(MemberConfig(**json.loads(sys.argv[1]))).run()
