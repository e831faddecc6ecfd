"""What the quota tests share: brokers they start (stopped and checked at teardown), and quota changes over
the wire with logstore's kio admin client (neither confluent-kafka nor kafka-python has the quota APIs)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.describe_client_quotas.v1 import request as describe_v1

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))

from broker_process import BrokerProcess  # noqa: E402
from logstore.broker.admin_client import AdminClient  # noqa: E402


@pytest.fixture
def start_broker(start_secure):
    """`start_broker(*overrides) -> BrokerProcess`: a broker on one PLAINTEXT listener (`start_secure`'s, so
    every one is stopped and checked at teardown)."""
    def start(*overrides: str) -> BrokerProcess:
        broker, _ = start_secure({"PLAINTEXT": "PLAINTEXT"}, *overrides)
        return broker
    return start


def alter(bootstrap: str, entity: dict[str, str | None], ops: dict[str, float | None], *,
          validate_only: bool = False):
    """AlterClientQuotas v1 of one entity (a None value removes the key); the response's entries."""
    request = alter_v1.AlterClientQuotasRequest(
        entries=(alter_v1.EntryData(
            entity=tuple(alter_v1.EntityData(entity_type=k, entity_name=n) for k, n in entity.items()),
            ops=tuple(alter_v1.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                      for k, v in ops.items())),),
        validate_only=validate_only)
    with AdminClient(bootstrap) as admin:
        return admin.request(request).entries


def describe(bootstrap: str, components: list[tuple[str, int, str | None]] = (), *, strict: bool = False):
    """DescribeClientQuotas v1: the response (components are (entity type, match type, match))."""
    request = describe_v1.DescribeClientQuotasRequest(
        components=tuple(describe_v1.ComponentData(entity_type=t, match_type=m, match=s) for t, m, s in components),
        strict=strict)
    with AdminClient(bootstrap) as admin:
        return admin.request(request)


def described(response) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """A DescribeClientQuotas answer as {entity: {key: value}}."""
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def log_bytes(data_dir: Path, topic: str) -> int:
    """The bytes of a topic's partition 0 on the broker's disk (its .log files)."""
    return sum(p.stat().st_size for p in (data_dir / f"{topic}-0").glob("*.log"))
