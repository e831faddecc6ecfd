"""DescribeClientQuotas (48) and AlterClientQuotas (49) over the wire, and the quotas across a SIGKILL."""
from __future__ import annotations

import pytest
from kio.schema.alter_client_quotas.v0 import request as v0

import quota_broker
from logstore.broker.admin_client import AdminClient
from logstore.broker.quota_store import CLIENT_QUOTAS_FILE
from quota_broker import alter, describe, described

start_broker = quota_broker.start_broker   # the fixture
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def test_altered_quotas_are_described_with_kafkas_filters(start_broker):
    broker = start_broker()
    b = broker.bootstrap
    for entity, ops in [({"user": "alice"}, {"producer_byte_rate": 1024.0}),
                        ({"user": "alice", "client-id": "app"}, {"consumer_byte_rate": 2048.0}),
                        ({"user": None}, {"request_percentage": 50.0}),
                        ({"client-id": None}, {"producer_byte_rate": 4096.0}),
                        ({"client-id": "app"}, {"producer_byte_rate": 8192.0, "consumer_byte_rate": 16384.0})]:
        [entry] = alter(b, entity, ops)
        assert (entry.error_code, entry.error_message) == (0, None)
    everything = described(describe(b))
    assert len(everything) == 5
    assert described(describe(b, [("user", EXACT, "alice")])) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 2048.0}}
    assert described(describe(b, [("user", EXACT, "alice")], strict=True)) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0}}
    assert described(describe(b, [("user", DEFAULT, None)])) == {(("user", None),): {"request_percentage": 50.0}}
    assert set(described(describe(b, [("client-id", SPECIFIED, None)], strict=True))) == {
        (("client-id", None),), (("client-id", "app"),)}
    assert set(described(describe(b, [("client-id", SPECIFIED, None), ("user", SPECIFIED, None)]))) == {
        (("client-id", "app"), ("user", "alice"))}
    # Removing the last key removes the entity; removing an unset key is no change.
    assert [e.error_code for e in alter(b, {"user": "alice"}, {"producer_byte_rate": None, "consumer_byte_rate": None})
            ] == [0]
    assert (("user", "alice"),) not in described(describe(b))


@pytest.mark.parametrize("components, code, message", [
    ([("", EXACT, "x")], 42, "Invalid empty entity type."),
    ([("user", EXACT, "a"), ("user", DEFAULT, None)], 42, "Entity type user cannot appear more than once in the "
                                                          "filter."),
    ([("user", EXACT, None)], 42, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", DEFAULT, "a")], 42, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("group", EXACT, "a")], 35, "Unsupported entity type group"),
    ([("user", 7, None)], 35, "Unknown match type 7"),
    ([("ip", SPECIFIED, None), ("user", SPECIFIED, None)], 42, "Invalid entity filter component combination. IP "
     "filter component should not be used with user or clientId filter component."),
])
def test_a_bad_filter_is_refused_as_kafka_refuses_it(start_broker, components, code, message):
    response = describe(start_broker().bootstrap, components)
    assert (response.error_code, response.error_message, response.entries) == (code, message, None)


def test_bad_alterations_answer_invalid_request_and_change_nothing(start_broker):
    broker = start_broker()
    for entity, ops, message in [
            ({"user": "a"}, {"producer_byte_rate": -1.0}, "Quota producer_byte_rate must be greater than 0"),
            ({"user": "a"}, {"bogus": 1.0}, "Invalid configuration key bogus"),
            ({"team": "a"}, {"producer_byte_rate": 1.0}, "Unhandled client quota entity type: team"),
            ({"client-id": ""}, {"producer_byte_rate": 1.0}, "Empty client-id not supported")]:
        [entry] = alter(broker.bootstrap, entity, ops)
        assert (entry.error_code, entry.error_message) == (42, message)
    [entry] = alter(broker.bootstrap, {"user": "a"}, {"producer_byte_rate": 10.0}, validate_only=True)
    assert entry.error_code == 0
    assert described(describe(broker.bootstrap)) == {}
    assert not (broker.data_dir / CLIENT_QUOTAS_FILE).exists()


def test_quotas_survive_a_sigkill(start_broker):
    broker = start_broker()
    alter(broker.bootstrap, {"client-id": "slow"}, {"producer_byte_rate": 1048576.0})
    alter(broker.bootstrap, {"user": None, "client-id": None}, {"consumer_byte_rate": 2097152.0})
    before = described(describe(broker.bootstrap))
    broker.kill()
    broker.start()
    assert described(describe(broker.bootstrap)) == before == {
        (("client-id", "slow"),): {"producer_byte_rate": 1048576.0},
        (("client-id", None), ("user", None)): {"consumer_byte_rate": 2097152.0}}


def test_a_corrupt_quota_file_stops_the_start_naming_it(start_broker):
    broker = start_broker()
    alter(broker.bootstrap, {"client-id": "slow"}, {"producer_byte_rate": 1048576.0})
    broker.stop()
    (broker.data_dir / CLIENT_QUOTAS_FILE).write_text('{"version": 0, "generation": 1, "entities": [')
    with pytest.raises(pytest.fail.Exception):
        broker.start()
    assert str(broker.data_dir / CLIENT_QUOTAS_FILE) in broker.log_text()
    (broker.data_dir / CLIENT_QUOTAS_FILE).unlink()
    broker.start()


def test_a_message_echoing_long_names_still_fits_v0s_error_message(start_broker):
    # Found by the hostile soak (seed 680966563): a message naming the entity twice ran past the 32767 bytes
    # of v0's int16-length string, its encoding failed and the connection closed instead of answering.
    long_name = "n" * 20_000
    entity = (v0.EntityData(entity_type="user", entity_name=long_name),
              v0.EntityData(entity_type="client-id", entity_name=long_name))
    entry = v0.EntryData(entity=entity, ops=(v0.OpData(key="producer_byte_rate", value=1.0, remove=False),))
    with AdminClient(start_broker().bootstrap) as admin:
        [answer] = admin.request(v0.AlterClientQuotasRequest(entries=(entry, entry), validate_only=True)).entries
    assert answer.error_code == 42   # INVALID_REQUEST: the entity named twice
    assert answer.error_message.startswith("Ignoring duplicate entity ClientQuotaEntity(entries={")
    assert answer.error_message.endswith("\u2026") and len(answer.error_message) == 4096
    assert [(e.entity_type, e.entity_name) for e in answer.entity] == [("client-id", long_name), ("user", long_name)]
