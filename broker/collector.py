"""The cycle collector in a long-running broker: what lives as long as the process is frozen out of its passes.

CPython's full collection walks every tracked object, and it runs once the objects promoted since the last
one reach a quarter of those that survived it. A broker of 10,000 partitions holds some 530,000 of them
(about 47 a partition, 0.3 s of CPU a pass here), and a Produce or Fetch over thousands of partitions keeps
tens of thousands alive across the young collections that promote them: under such traffic a full pass ran
every 3 s and held the event loop 0.6-1.7 s, finding nothing to free (bench/c_client_curves.py's partitions
sweep, timed with gc.callbacks). `gc.freeze()` moves every tracked object to a permanent generation that no
pass visits, so later passes walk only what came after.

Frozen objects are still freed by reference counting; only cycles among them would outlive their use. So
the broker freezes when what exists is long-lived: once it has started (modules, configuration, the
partitions it opened) and after it made many partitions at once. A deleted topic's logs hold no cycle (a
closed GroupCommit drops the log's callbacks) and are freed at once; deleting a topic still thaws
everything, so that anything else of it left in a cycle is freed by the next full pass, which freezes what
it leaves again.
"""
from __future__ import annotations

import gc

# A creation of at least this many partitions is worth a freeze: smaller ones add little to a pass.
BULK_PARTITIONS = 1_000

_refreeze = False


def settle() -> None:
    """Freeze every object the process holds now: call when they are long-lived (start-up done)."""
    gc.freeze()


def created(partitions: int) -> None:
    """Partitions were just made: freeze them (and all else) if there were many."""
    if partitions >= BULK_PARTITIONS:
        gc.freeze()


def thaw() -> None:
    """Something long-lived was dropped (a deleted topic): let the next full pass see everything, and freeze
    what survives it."""
    global _refreeze
    gc.unfreeze()
    _refreeze = True
    if _after_pass not in gc.callbacks:
        gc.callbacks.append(_after_pass)


def _after_pass(phase: str, info: dict[str, int]) -> None:
    global _refreeze
    if _refreeze and phase == "stop" and info["generation"] == 2:
        _refreeze = False
        gc.freeze()
