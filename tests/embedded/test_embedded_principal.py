"""The embedded clients run as a configurable principal under the node's authorizer: Kafka's StandardAuthorizer
over the directory's ACLs, asked what the broker's handlers ask, refusing with the *AuthorizationFailedError
of the resource type."""
from __future__ import annotations

import pytest

from logstore.broker import embedded
from logstore.broker.acls import AclBinding
from logstore.broker.authorizer import (
    CLUSTER_NAME,
    STANDARD_AUTHORIZER,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from logstore.broker.embedded.access import authorizer_of
from logstore.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidConfigError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

Op, RT = AclOperation, ResourceType
ALICE = "User:alice"
EMBEDDED = {"group.initial.rebalance.delay.ms": 0, "auto.create.topics.enable": False}


@pytest.fixture
def secured(tmp_path):
    """A node whose clients are decided by the StandardAuthorizer, with User:admin a super user, and `allow`
    to grant User:alice an operation on a resource (LITERAL, every host)."""
    node = embedded.open(str(tmp_path / "data"), {**EMBEDDED, "authorizer.class.name": STANDARD_AUTHORIZER,
                                                  "super.users": "User:admin"})

    def allow(operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME,
              permission: AclPermissionType = AclPermissionType.ALLOW) -> None:
        binding = AclBinding(resource_type, name, PatternType.LITERAL, ALICE, "*", operation, permission)
        assert authorizer_of(node).create_acls([binding]) == [None]

    node.store.create_topic("orders", 1)
    node.store.create_topic("audit", 1)
    yield node, allow
    node.close()


def _alice(**settings):
    return {"principal": ALICE, **settings}


def test_without_an_authorizer_every_principal_may_do_everything(tmp_path):
    with embedded.open(str(tmp_path / "data"), EMBEDDED) as node:
        node.store.create_topic("orders", 1)
        with embedded.Producer(node, _alice(**{"linger.ms": 0})) as producer:
            assert producer.send("orders", b"v").result(10).offset == 0


def test_the_principal_setting_is_kafkas_type_and_name(secured):
    node, _ = secured
    with pytest.raises(InvalidConfigError, match="principal"):
        embedded.Producer(node, {"principal": "alice"})
    with pytest.raises(InvalidConfigError, match="principal"):
        embedded.Consumer(node, {"principal": ""})


def test_the_default_principal_is_anonymous_and_gets_no_acl_for_alice(secured):
    node, allow = secured
    allow(Op.WRITE, RT.TOPIC, "orders")
    with pytest.raises(ClusterAuthorizationFailedError):
        embedded.Producer(node)   # User:ANONYMOUS: no IDEMPOTENT_WRITE, no WRITE on any topic
    with embedded.Producer(node, _alice(**{"linger.ms": 0})) as producer:
        assert producer.send("orders", b"v").result(10).offset == 0


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(secured):
    node, allow = secured
    with pytest.raises(ClusterAuthorizationFailedError):
        embedded.Producer(node, _alice())
    embedded.Producer(node, _alice(**{"enable.idempotence": False})).close()   # no InitProducerId: no check
    allow(Op.IDEMPOTENT_WRITE, RT.CLUSTER)
    embedded.Producer(node, _alice()).close()


def test_send_needs_write_on_the_topic_and_creating_it_needs_create(secured, tmp_path):
    node, allow = secured
    allow(Op.WRITE, RT.TOPIC, "orders")
    with embedded.Producer(node, _alice(**{"linger.ms": 0})) as producer:
        assert producer.send("orders", b"v").result(10).offset == 0
        with pytest.raises(TopicAuthorizationFailedError) as refused:
            producer.send("audit", b"v")
        assert refused.value.names == ("audit",)
    assert node.store.log("audit", 0).high_watermark == 0


def test_auto_creation_needs_create_on_the_cluster_or_the_topic(tmp_path):
    settings = {**EMBEDDED, "auto.create.topics.enable": True, "authorizer.class.name": STANDARD_AUTHORIZER}
    with embedded.open(str(tmp_path / "data"), settings) as node:
        grant = authorizer_of(node).create_acls
        assert grant([AclBinding(RT.TOPIC, "new-", PatternType.PREFIXED, ALICE, "*", Op.WRITE,
                                 AclPermissionType.ALLOW)]) == [None]
        with embedded.Producer(node, _alice(**{"linger.ms": 0})) as producer:
            with pytest.raises(TopicAuthorizationFailedError):
                producer.send("new-one", b"v")
            assert "new-one" not in node.store.topics()
            assert grant([AclBinding(RT.TOPIC, "new-one", PatternType.LITERAL, ALICE, "*", Op.CREATE,
                                     AclPermissionType.ALLOW)]) == [None]
            assert producer.send("new-one", b"v").result(10).offset == 0
            assert grant([AclBinding(RT.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, ALICE, "*", Op.CREATE,
                                     AclPermissionType.ALLOW)]) == [None]
            assert producer.send("new-two", b"v").result(10).offset == 0


def test_transactions_need_write_on_the_transactional_id(secured):
    node, allow = secured
    allow(Op.WRITE, RT.TOPIC, "orders")
    producer = embedded.Producer(node, _alice(**{"transactional.id": "copier", "linger.ms": 0}))
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        producer.init_transactions()
    allow(Op.WRITE, RT.TRANSACTIONAL_ID, "copier")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"in a transaction")
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("audit", b"not allowed")
    with pytest.raises(embedded.IllegalStateError, match="may not WRITE TOPIC audit"):
        producer.commit_transaction()    # the refusal made the transaction abortable, as in the Java client
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("orders", b"committed")
    producer.commit_transaction()
    producer.close()


def test_offsets_in_a_transaction_need_read_on_the_group_and_topics(secured):
    node, allow = secured
    for operation, resource_type, name in ((Op.WRITE, RT.TOPIC, "orders"), (Op.WRITE, RT.TRANSACTIONAL_ID, "copier"),
                                           (Op.READ, RT.TOPIC, "orders")):
        allow(operation, resource_type, name)
    producer = embedded.Producer(node, _alice(**{"transactional.id": "copier"}))
    producer.init_transactions()
    producer.begin_transaction()
    with pytest.raises(GroupAuthorizationFailedError):
        producer.send_offsets_to_transaction({("orders", 0): 1}, embedded.GroupMetadata("billing", -1, "", None))
    producer.abort_transaction()
    allow(Op.READ, RT.GROUP, "billing")
    producer.begin_transaction()
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send_offsets_to_transaction({("audit", 0): 1}, embedded.GroupMetadata("billing", -1, "", None))
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send_offsets_to_transaction({("orders", 0): 1}, embedded.GroupMetadata("billing", -1, "", None))
    producer.commit_transaction()
    producer.close()


def test_a_consumer_needs_read_on_its_topics_and_its_group(secured):
    node, allow = secured
    with embedded.Producer(node, {"principal": "User:admin", "linger.ms": 0}) as producer:
        producer.send("orders", b"one").result(10)
    reader = embedded.Consumer(node, _alice(**{"auto.offset.reset": "earliest"}))
    reader.assign([("orders", 0)])
    with pytest.raises(TopicAuthorizationFailedError):
        reader.poll(0)
    allow(Op.READ, RT.TOPIC, "orders")
    assert [r.value for r in reader.poll(5)[("orders", 0)]] == [b"one"]
    reader.close()

    member = embedded.Consumer(node, _alice(**{"group.id": "billing", "auto.offset.reset": "earliest",
                                               "enable.auto.commit": False}))
    member.subscribe(["orders"])
    with pytest.raises(GroupAuthorizationFailedError):
        member.poll(0)
    with pytest.raises(GroupAuthorizationFailedError):
        member.committed([("orders", 0)])
    allow(Op.READ, RT.GROUP, "billing")
    assert [r.value for r in member.poll(10)[("orders", 0)]] == [b"one"]
    member.commit()
    assert member.committed([("orders", 0)]) == {("orders", 0): 1}
    allow(Op.READ, RT.TOPIC, "orders", AclPermissionType.DENY)
    with pytest.raises(TopicAuthorizationFailedError):
        member.commit({("orders", 0): 1})
    with pytest.raises(TopicAuthorizationFailedError):
        member.poll(0)
    member.close()


def test_super_users_bypass_every_acl(secured):
    node, allow = secured
    allow(Op.ALL, RT.TOPIC, "orders", AclPermissionType.DENY)
    with embedded.Producer(node, {"principal": "User:admin", "transactional.id": "admin-txn"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("orders", b"v")
        producer.commit_transaction()
