"""The quota manager against Kafka's rules: sampled rates, throttle times, precedence, the `client-quotas` file.

The model of the sampled rate is Kafka's SampledStat/Rate written as directly
as Java has it (a ring of samples, a current index, reset on expiry), so the
manager's own version is checked against it on random record sequences.
"""
from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.broker.quota_store import CLIENT_QUOTAS_FILE, QuotaStore, read_client_quotas
from logstore.broker.quotas import REQUEST, Alteration, ClientQuotas, QuotaManager, SampledRate, throttle_time
from logstore.checkpoints import CorruptCheckpointError

# -- Kafka's SampledStat and Rate, as a model ---------------------------------------------------


class KafkaRateModel:
    def __init__(self, samples: int, window_ms: int):
        self.samples_n, self.window_ms = samples, window_ms
        self.samples: list[list[float]] = []   # [lastWindowMs, value, eventCount]
        self.current = 0

    def _current(self, now):
        if not self.samples:
            self.samples.append([now, 0.0, 0])
        return self.samples[self.current]

    def record(self, value, now):
        sample = self._current(now)
        if now - sample[0] >= self.window_ms:
            self.current = (self.current + 1) % self.samples_n
            if self.current >= len(self.samples):
                self.samples.append([now, 0.0, 0])
            else:
                self.samples[self.current][:] = [now, 0.0, 0]
            sample = self.samples[self.current]
        sample[1] += value
        sample[2] += 1

    def _purge(self, now):
        for s in self.samples:
            if now - s[0] >= self.samples_n * self.window_ms:
                s[:] = [now, 0.0, 0]

    def window_size(self, now):
        self._purge(now)
        if not self.samples:
            self.samples.append([now, 0.0, 0])
        oldest = min(self.samples, key=lambda s: s[0])
        total = now - oldest[0]
        full = total // self.window_ms
        if full < self.samples_n - 1:
            total += (self.samples_n - 1 - full) * self.window_ms
        return total

    def measure(self, now):
        window = self.window_size(now)
        return sum(s[1] for s in self.samples) / (window / 1000.0)


records = st.lists(st.tuples(st.integers(0, 3000), st.floats(0, 1e7, allow_nan=False)), min_size=1, max_size=80)


@settings(max_examples=300, deadline=None)
@given(samples=st.integers(2, 12), window_s=st.integers(1, 3), steps=records)
def test_sampled_rate_is_kafkas_rate(samples, window_s, steps):
    ours, model = SampledRate(samples, window_s * 1000), KafkaRateModel(samples, window_s * 1000)
    now = 1_000_000
    for gap, value in steps:
        now += gap
        ours.record(value, now)
        model.record(value, now)
        assert ours.window_size_ms(now) == model.window_size(now)
        assert ours.measure(now) == pytest.approx(model.measure(now), rel=1e-9, abs=1e-9)


def test_throttle_time_is_kafkas_formula():
    # O = 2 MB/s observed against T = 1 MB/s over a 10 s window: X = (O - T) / T * W = 10 s.
    assert throttle_time(2_000_000, 1_000_000, 10_000) == 10_000
    assert throttle_time(1_500_000, 1_000_000, 11_000) == 5_500
    assert throttle_time(1_000_001, 1_000_000, 10_000) == 0   # rounded, as Math.round


def _client_rate(bound: int, chunk: int, samples: int, window_s: int, speed_ms: int) -> tuple[float, float]:
    """(average rate, burst allowance) of a client sending `chunk`s as fast as it can (one each `speed_ms`)
    but waiting each throttle time out (KIP-219), over two simulated minutes."""
    now = [0]
    manager = QuotaManager("producer_byte_rate", samples, window_s, clock=lambda: now[0])
    manager.set_quotas({(("client-id", "c"),): float(bound)})
    sent = 0
    while now[0] < 120_000:
        wait = manager.record("ANONYMOUS", "c", chunk)
        sent += chunk
        now[0] += max(wait, speed_ms, 1)
    # A young sensor lets up to (samples - 1) windows' worth through before the first throttle.
    return sent / (now[0] / 1000), (bound * (samples - 1) * window_s + chunk) / (now[0] / 1000)


@settings(max_examples=60, deadline=None)
@given(bound=st.integers(10_000, 5_000_000), share=st.floats(0.001, 0.25), samples=st.integers(2, 11),
       window_s=st.integers(1, 2), speed_ms=st.integers(0, 5))
def test_a_client_that_waits_its_throttle_times_keeps_its_rate(bound, share, samples, window_s, speed_ms):
    """Requests of up to a quarter of a second's quota: the average is the quota (1 %) once past the burst."""
    chunk = max(1, int(bound * share))
    rate, allowance = _client_rate(bound, chunk, samples, window_s, speed_ms)
    assert rate <= (bound + allowance) * 1.01
    if chunk * 1000 / max(speed_ms, 1) > bound * 1.1:     # a client able to go faster than its quota
        assert rate >= bound * 0.99


@settings(max_examples=30, deadline=None)
@given(bound=st.integers(10_000, 5_000_000), share=st.floats(0.25, 1.0), window_s=st.integers(1, 2))
def test_requests_as_large_as_the_quota_stay_within_5_percent_with_kafkas_default_samples(bound, share, window_s):
    """With quota.window.num=11 (Kafka's default) even one-second requests average within 5 % of the quota."""
    rate, allowance = _client_rate(bound, max(1, int(bound * share)), 11, window_s, 0)
    assert bound * 0.95 <= rate <= (bound + allowance) * 1.05


def test_request_time_throttle_is_bounded_by_one_window():
    now = [0]
    manager = QuotaManager(REQUEST, 11, 1, clock=lambda: now[0], bounded=True)
    manager.set_quotas({(("user", None),): 1.0})
    assert manager.record("alice", "app", 100_000.0) == 1000


# -- precedence ---------------------------------------------------------------------------------

LEVELS = [
    (("client-id", "app"), ("user", "alice")),
    (("client-id", None), ("user", "alice")),
    (("user", "alice"),),
    (("client-id", "app"), ("user", None)),
    (("client-id", None), ("user", None)),
    (("user", None),),
    (("client-id", "app"),),
    (("client-id", None),),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_level_wins(level):
    """With every level from `level` down set, alice's app gets level `level`'s quota (Kafka's 8 levels)."""
    manager = QuotaManager("producer_byte_rate", 11, 1)
    manager.set_quotas({LEVELS[i]: float(1000 * (i + 1)) for i in range(level, len(LEVELS))})
    assert manager.quota("alice", "app") == 1000 * (level + 1)
    # Another user and client id fall to the defaults their own names reach.
    assert manager.quota("bob", "other") == next(
        (1000.0 * (i + 1) for i in range(level, len(LEVELS))
         if all(name is None for _, name in LEVELS[i])), None)


def test_a_client_id_quota_is_shared_by_every_user_of_that_client_id():
    now = [0]
    manager = QuotaManager("producer_byte_rate", 2, 1, clock=lambda: now[0])
    manager.set_quotas({(("client-id", "app"),): 1000.0})
    assert manager.record("alice", "app", 900) == 0
    assert manager.record("bob", "app", 900) > 0          # the same sensor: 1800 B over 1 s
    assert manager.record("bob", "other", 900_000) == 0   # no quota applies to another client id
    manager.set_quotas({(("user", "alice"),): 1000.0})
    assert manager.record("alice", "x", 900) == 0
    assert manager.record("alice", "y", 900) > 0          # a user quota: shared by the user's clients


def test_nothing_is_recorded_without_quotas():
    manager = QuotaManager("producer_byte_rate", 11, 1)
    assert not manager.enabled
    assert manager.record("alice", "app", 10**12) == 0
    assert manager.max_value_in_window("alice", "app") > 10**18


# -- alteration rules and the file ----------------------------------------------------------------

def _quotas(tmp_path, dirs=1):
    roots = [str(tmp_path / f"d{i}") for i in range(dirs)]
    for root in roots:
        os.makedirs(root, exist_ok=True)
    return roots, ClientQuotas(roots, 11, 1)


@pytest.mark.parametrize("entity, ops, message", [
    ((), [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
    ((("group", "g"),), [("producer_byte_rate", 1.0)], "Unhandled client quota entity type: group"),
    ((("user", ""),), [("producer_byte_rate", 1.0)], "Empty user not supported"),
    ((("user", "a"), ("user", "b")), [("producer_byte_rate", 1.0)],
     "Invalid client quota entity, duplicate entity entry user"),
    ((("user", "a"),), [("producr_byte_rate", 1.0)], "Invalid configuration key producr_byte_rate"),
    ((("user", "a"),), [("producer_byte_rate", -5.0)], "Quota producer_byte_rate must be greater than 0"),
    ((("user", "a"),), [("producer_byte_rate", 0.0)], "Quota producer_byte_rate must be greater than 0"),
    ((("user", "a"),), [("consumer_byte_rate", 1.5)], "consumer_byte_rate cannot be a fractional value."),
    ((("user", "a"),), [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={user=a})"),
    ((("ip", "127.0.0.1"),), [("connection_creation_rate", 1.0)],
     "ip quotas (connection_creation_rate) are not enforced by this broker"),
    ((("client-id", "c"),), [("controller_mutation_rate", 1.0)],
     "Quota controller_mutation_rate is not enforced by this broker"),
])
def test_bad_alterations_are_refused_with_kafkas_message(tmp_path, entity, ops, message):
    roots, quotas = _quotas(tmp_path)
    assert quotas.alter([Alteration(entity, ops), Alteration((("user", "ok"),), [("request_percentage", 12.5)])]) \
        == [message, None]
    assert quotas.configs() == {(("user", "ok"),): {"request_percentage": 12.5}}


def test_a_change_is_kept_in_every_log_dir_and_the_highest_generation_wins(tmp_path):
    roots, quotas = _quotas(tmp_path, dirs=2)
    quotas.alter([Alteration((("user", None), ("client-id", "app")), [("producer_byte_rate", 1048576.0)])])
    quotas.alter([Alteration((("user", "alice"),), [("consumer_byte_rate", 2048.0)])])
    quotas.alter([Alteration((("user", "alice"),), [("consumer_byte_rate", None)])])
    expected = {(("client-id", "app"), ("user", None)): {"producer_byte_rate": 1048576.0}}
    assert quotas.configs() == expected
    for root in roots:
        assert read_client_quotas(os.path.join(root, CLIENT_QUOTAS_FILE))[0] == 3
    assert ClientQuotas(roots, 11, 1).produce.quota("anyone", "app") == 1048576.0
    # A crash between the two copies leaves one a generation ahead: it wins, wherever it is.
    ahead = ClientQuotas([roots[1]], 11, 1)
    ahead.alter([Alteration((("user", "new"),), [("producer_byte_rate", 1.0)])])
    assert ClientQuotas(roots, 11, 1).configs() == {**expected, (("user", "new"),): {"producer_byte_rate": 1.0}}
    assert ClientQuotas([roots[0]], 11, 1).configs() == expected


def test_validate_only_changes_nothing(tmp_path):
    roots, quotas = _quotas(tmp_path)
    assert quotas.alter([Alteration((("user", "a"),), [("producer_byte_rate", 5.0)])], validate_only=True) == [None]
    assert quotas.configs() == {}
    assert not os.path.exists(os.path.join(roots[0], CLIENT_QUOTAS_FILE))


@pytest.mark.parametrize("content, reason", [
    (b"{not json", "Expecting property name"),
    (b"\xff\xfe", "not UTF-8"),
    (json.dumps({"version": 1, "generation": 1, "entities": []}).encode(), "expected version 0"),
    (json.dumps({"version": 0, "generation": 1, "entities": [
        {"entity": {"user": "a"}, "quotas": {"producer_byte_rate": -1}}]}).encode(), "must be greater than 0"),
    (json.dumps({"version": 0, "generation": 1, "entities": [
        {"entity": {"team": "a"}, "quotas": {"producer_byte_rate": 1}}]}).encode(), "Unhandled client quota"),
])
def test_a_corrupt_file_is_a_typed_error_naming_it(tmp_path, content, reason):
    root = tmp_path / "d0"
    root.mkdir()
    (root / CLIENT_QUOTAS_FILE).write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as caught:
        QuotaStore([str(root)]).load()
    assert str(root / CLIENT_QUOTAS_FILE) in str(caught.value)
    assert reason in str(caught.value)
