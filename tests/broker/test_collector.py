"""The broker's cycle-collector policy (broker/collector.py) with the process's real collector: frozen objects
stay out of full passes, a thaw lets the next pass free a dropped cycle and freezes what it leaves."""
from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from logstore.broker import collector


class Node:
    """An object in a reference cycle, as a Log and its open GroupCommit's callbacks are."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Every test starts and ends with nothing frozen and the policy's callback gone."""
    gc.collect()
    gc.unfreeze()
    yield
    collector._refreeze = False
    if collector._after_pass in gc.callbacks:
        gc.callbacks.remove(collector._after_pass)
    gc.unfreeze()
    gc.collect()


def dropped_cycle() -> weakref.ref[Node]:
    """A cycle no one refers to any more; a weak reference tells whether a pass freed it."""
    return weakref.ref(Node())


def test_a_settled_cycle_outlives_full_passes() -> None:
    node = Node()
    alive = weakref.ref(node)
    collector.settle()
    del node
    gc.collect()
    assert alive() is not None   # frozen: no pass visits it
    assert gc.get_freeze_count() > 0


def test_a_thaw_lets_the_next_pass_free_a_frozen_cycle_and_freezes_what_survives() -> None:
    node, kept = Node(), Node()
    freed, survivor = weakref.ref(node), weakref.ref(kept)
    collector.settle()
    del node                     # a deleted topic's log
    collector.thaw()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert freed() is None
    assert survivor() is kept
    assert gc.get_freeze_count() > 0   # the survivors, frozen again after the pass
    later = dropped_cycle()
    gc.collect()
    assert later() is None       # what came after the refreeze is collected as usual


def test_only_a_bulk_creation_freezes() -> None:
    collector.created(collector.BULK_PARTITIONS - 1)
    assert gc.get_freeze_count() == 0
    collector.created(collector.BULK_PARTITIONS)
    assert gc.get_freeze_count() > 0

