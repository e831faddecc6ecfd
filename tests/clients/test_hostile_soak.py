"""The hostile-client soak of issue 25 (hostile_soak.py): FrameGrammar's frames on 12 connections for
10 minutes (LOGSTORE_HOSTILE_SECONDS shortens it) against one broker, beside a well-behaved producer and
consumer whose solo rates are measured first (over at most 2 minutes: rates compare, not totals).
LOGSTORE_HOSTILE_SEED=<n> replays a seed's frames (the timing still varies)."""
from __future__ import annotations

import os
import random

import pytest

from hostile_soak import BROKER_SETTINGS, hostile_soak

pytestmark = pytest.mark.soak

SECONDS = float(os.environ.get("LOGSTORE_HOSTILE_SECONDS", 600))
SEED = int(os.environ.get("LOGSTORE_HOSTILE_SEED", random.randrange(1 << 30)))


def test_hostile_frames_for_ten_minutes_beside_well_behaved_clients(start_broker):
    broker = start_broker(*BROKER_SETTINGS)
    print(f"seed {SEED}")
    hostile_soak(broker, seconds=SECONDS, solo_seconds=min(SECONDS, 120.0), seed=SEED, connections=12)
