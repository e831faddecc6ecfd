"""Topics with names up to Kafka's 249 characters are deleted for good: the directory a partition is renamed
to before its files go is Kafka's `<topic>-<partition>.<uuid>-delete` with the topic cut to fit 255 bytes,
and an open finishes the removal of either form."""
from __future__ import annotations

import os
import re

import pytest

import logstore
from logstore.filenames import delete_dir_name, is_delete_dir

UNIQUE = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("topic, partition, expected", [
    ("orders", 3, f"orders-3.{UNIQUE}-delete"),
    # Kafka's logDirNameWithSuffixCappedLength: the suffix is whole, the topic keeps what fits.
    ("t" * 249, 0, "t" * (255 - len(f"-0.{UNIQUE}-delete")) + f"-0.{UNIQUE}-delete"),
    ("t" * 249, 12345, "t" * (255 - len(f"-12345.{UNIQUE}-delete")) + f"-12345.{UNIQUE}-delete"),
])
def test_the_deletion_name_is_kafkas_and_fits_255_bytes(topic, partition, expected):
    assert delete_dir_name(topic, partition, UNIQUE) == expected
    assert len(expected.encode()) <= 255 and is_delete_dir(expected)


def test_a_fresh_deletion_name_is_unique_each_time():
    first, second = delete_dir_name("t" * 249, 0), delete_dir_name("t" * 249, 0)
    assert first != second and all(re.fullmatch(r"t+-0\.[0-9a-f]{32}-delete", n) for n in (first, second))


@pytest.mark.parametrize("length", [1, 213, 214, 249])
def test_a_topic_of_any_legal_length_is_deleted_and_stays_deleted(tmp_path, length):
    topic = "x" * length
    with logstore.open(str(tmp_path)) as store:
        store.create_topic(topic, 2)
        for p in range(2):
            store.log(topic, p).append_records([b"v%d" % p], durable=True)
        store.delete_topic(topic)
        assert topic not in store.topics()
        assert not [n for n in os.listdir(tmp_path) if n.startswith("x")]
    with logstore.open(str(tmp_path)) as store:
        assert topic not in store.topics()


def test_an_open_finishes_the_removal_of_both_forms(tmp_path):
    with logstore.open(str(tmp_path)) as store:
        store.create_topic("kept")
    full = tmp_path / f"short-0.{UNIQUE}-delete"
    shortened = tmp_path / delete_dir_name("y" * 249, 7)
    for left in (full, shortened):
        # What a crash between the rename and the removal leaves.
        left.mkdir()
        (left / "00000000000000000000.log").write_bytes(b"gone")
    with logstore.open(str(tmp_path)) as store:
        assert store.topics() == {"kept": 1}
    assert not full.exists() and not shortened.exists()
