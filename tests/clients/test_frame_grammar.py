"""The hostile-client loop of issue 25 (hostile_soak.py), briefly, so that `make test` catches regressions:
a few thousand of FrameGrammar's frames on 8 connections for about 8 s beside a well-behaved producer and
consumer. The 10-minute run is test_hostile_soak.py (`make soak`). LOGSTORE_HOSTILE_SEED=<n> replays a seed."""
from __future__ import annotations

import os
import random

from frame_grammar import FrameGrammar, hostile_topics
from hostile_soak import BROKER_SETTINGS, MAX_REQUEST_BYTES, hostile_soak
from logstore.broker.api import REGISTRY, load_all
from logstore.broker.protocol import decode_request

SEED = int(os.environ.get("LOGSTORE_HOSTILE_SEED", random.randrange(1 << 30)))


def test_valid_frames_of_every_advertised_api_decode_as_the_broker_reads_them():
    load_all()
    apis = {a.key: (a.min_version, a.max_version) for a in REGISTRY.values()}
    grammar = FrameGrammar(random.Random(SEED), apis, hostile_topics("h"), MAX_REQUEST_BYTES)
    for api in grammar.apis:
        for corr in range(2):
            _, _, frame = grammar.request(corr, api)
            header, body = decode_request(frame[4:])
            assert (header.request_api_key, header.request_api_version, header.correlation_id) == (*api, corr), \
                f"seed {SEED}: {api} frame {frame[:200].hex()}"
            assert (body.__api_key__, body.__version__) == api


def test_hostile_frames_beside_well_behaved_clients_briefly(start_broker):
    broker = start_broker(*BROKER_SETTINGS)
    print(f"seed {SEED}")
    hostile_soak(broker, seconds=8.0, solo_seconds=5.0, seed=SEED, connections=8)
