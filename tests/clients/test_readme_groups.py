"""The README's consumer group example and its `logstore groups` commands run as written against a real broker."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
TIMEOUT = 60.0  # s: a bound on the example and on each command
README_ADDRESS = "127.0.0.1:9092"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", README.read_text(), re.S)


def test_readme_group_example_commits_and_the_cli_commands_show_and_remove_it(start_broker):
    # Default group settings: the example must work with the initial rebalance delay users get.
    broker = start_broker("offsets.topic.num.partitions=3")
    # The broker example (the embedded clients' example subscribes too).
    example = next(b for b in blocks("python") if "subscribe(" in b and README_ADDRESS in b)
    commands = [line for b in blocks("sh") for line in b.splitlines() if line.startswith("logstore groups ")]
    (sample,) = [b for b in blocks("text") if "CURRENT-OFFSET" in b]
    assert [c.split()[4] for c in commands] == ["list", "describe", "describe", "reset-offsets", "delete-offsets",
                                                "delete"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in (b"one", b"two", b"three"):
        producer.produce("orders", value, partition=0)
    assert producer.flush(TIMEOUT) == 0

    ran = subprocess.run([sys.executable, "-c", example.replace(README_ADDRESS, broker.bootstrap)],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["0 0 b'one'", "0 1 b'two'"]

    outputs = []
    for command in commands:
        args = command.replace(README_ADDRESS, broker.bootstrap).split()[1:]
        done = subprocess.run([sys.executable, "-m", "logstore", *args], capture_output=True, text=True,
                              timeout=TIMEOUT)
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout)
    listed, described, members, reset, deleted_offsets, deleted = outputs
    assert [line.split() for line in listed.splitlines()] == [["GROUP", "PROTOCOL-TYPE", "STATE"],
                                                              ["billing", "consumer", "Empty"]]
    assert [line.split() for line in described.splitlines()] == [line.split() for line in sample.splitlines()]
    assert members.split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                               "ASSIGNMENT"], "no members once the example closed its consumer"
    assert reset.splitlines()[1].split() == ["billing", "orders", "0", "0"]
    assert deleted_offsets.splitlines()[-1].split() == ["orders", "0", "Successful"]
    assert deleted == "Deletion of requested consumer groups ('billing') was successful.\n"
