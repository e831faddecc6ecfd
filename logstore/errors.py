"""Every Kafka error code in one table, and the exceptions logstore raises.

Kafka's socket server answers bad *content* with an error code; each exception
below that can reach a client carries the Kafka `code` and whether the Java
client treats it as `retriable`. Decoders raise only `CorruptRecordError` and
its subclasses, always with the byte `position` of the fault.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KafkaErrorCode:
    """One row of Kafka's error table: number, name, retriable."""

    code: int
    name: str
    retriable: bool


_TABLE = (
    (-1, "UNKNOWN_SERVER_ERROR", False), (0, "NONE", False),
    (1, "OFFSET_OUT_OF_RANGE", False), (2, "CORRUPT_MESSAGE", True),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True), (4, "INVALID_FETCH_SIZE", False),
    (5, "LEADER_NOT_AVAILABLE", True), (6, "NOT_LEADER_OR_FOLLOWER", True),
    (7, "REQUEST_TIMED_OUT", True), (8, "BROKER_NOT_AVAILABLE", False),
    (9, "REPLICA_NOT_AVAILABLE", True), (10, "MESSAGE_TOO_LARGE", False),
    (11, "STALE_CONTROLLER_EPOCH", False), (12, "OFFSET_METADATA_TOO_LARGE", False),
    (13, "NETWORK_EXCEPTION", True), (14, "COORDINATOR_LOAD_IN_PROGRESS", True),
    (15, "COORDINATOR_NOT_AVAILABLE", True), (16, "NOT_COORDINATOR", True),
    (17, "INVALID_TOPIC_EXCEPTION", False), (18, "RECORD_LIST_TOO_LARGE", False),
    (19, "NOT_ENOUGH_REPLICAS", True), (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
    (21, "INVALID_REQUIRED_ACKS", False), (22, "ILLEGAL_GENERATION", False),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False), (24, "INVALID_GROUP_ID", False),
    (25, "UNKNOWN_MEMBER_ID", False), (26, "INVALID_SESSION_TIMEOUT", False),
    (27, "REBALANCE_IN_PROGRESS", False), (28, "INVALID_COMMIT_OFFSET_SIZE", False),
    (29, "TOPIC_AUTHORIZATION_FAILED", False), (30, "GROUP_AUTHORIZATION_FAILED", False),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False), (32, "INVALID_TIMESTAMP", False),
    (33, "UNSUPPORTED_SASL_MECHANISM", False), (34, "ILLEGAL_SASL_STATE", False),
    (35, "UNSUPPORTED_VERSION", False), (36, "TOPIC_ALREADY_EXISTS", False),
    (37, "INVALID_PARTITIONS", False), (38, "INVALID_REPLICATION_FACTOR", False),
    (39, "INVALID_REPLICA_ASSIGNMENT", False), (40, "INVALID_CONFIG", False),
    (41, "NOT_CONTROLLER", True), (42, "INVALID_REQUEST", False),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False), (44, "POLICY_VIOLATION", False),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False), (46, "DUPLICATE_SEQUENCE_NUMBER", False),
    (47, "INVALID_PRODUCER_EPOCH", False), (48, "INVALID_TXN_STATE", False),
    (49, "INVALID_PRODUCER_ID_MAPPING", False), (50, "INVALID_TRANSACTION_TIMEOUT", False),
    (51, "CONCURRENT_TRANSACTIONS", True), (52, "TRANSACTION_COORDINATOR_FENCED", False),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False), (54, "SECURITY_DISABLED", False),
    (55, "OPERATION_NOT_ATTEMPTED", False), (56, "KAFKA_STORAGE_ERROR", True),
    (57, "LOG_DIR_NOT_FOUND", False), (58, "SASL_AUTHENTICATION_FAILED", False),
    (59, "UNKNOWN_PRODUCER_ID", False), (60, "REASSIGNMENT_IN_PROGRESS", False),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False), (62, "DELEGATION_TOKEN_NOT_FOUND", False),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", False),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False),
    (66, "DELEGATION_TOKEN_EXPIRED", False), (67, "INVALID_PRINCIPAL_TYPE", False),
    (68, "NON_EMPTY_GROUP", False), (69, "GROUP_ID_NOT_FOUND", False),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True), (71, "INVALID_FETCH_SESSION_EPOCH", True),
    (72, "LISTENER_NOT_FOUND", True), (73, "TOPIC_DELETION_DISABLED", False),
    (74, "FENCED_LEADER_EPOCH", True), (75, "UNKNOWN_LEADER_EPOCH", True),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False), (77, "STALE_BROKER_EPOCH", False),
    (78, "OFFSET_NOT_AVAILABLE", True), (79, "MEMBER_ID_REQUIRED", False),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True), (81, "GROUP_MAX_SIZE_REACHED", False),
    (82, "FENCED_INSTANCE_ID", False), (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True),
    (84, "ELECTION_NOT_NEEDED", True), (85, "NO_REASSIGNMENT_IN_PROGRESS", False),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False), (87, "INVALID_RECORD", False),
    (88, "UNSTABLE_OFFSET_COMMIT", True), (89, "THROTTLING_QUOTA_EXCEEDED", True),
    (90, "PRODUCER_FENCED", False), (91, "RESOURCE_NOT_FOUND", False),
    (92, "DUPLICATE_RESOURCE", False), (93, "UNACCEPTABLE_CREDENTIAL", False),
    (94, "INCONSISTENT_VOTER_SET", False), (95, "INVALID_UPDATE_VERSION", False),
    (96, "FEATURE_UPDATE_FAILED", False), (97, "PRINCIPAL_DESERIALIZATION_FAILURE", False),
    (98, "SNAPSHOT_NOT_FOUND", False), (99, "POSITION_OUT_OF_RANGE", False),
    (100, "UNKNOWN_TOPIC_ID", True), (101, "DUPLICATE_BROKER_REGISTRATION", False),
    (102, "BROKER_ID_NOT_REGISTERED", False), (103, "INCONSISTENT_TOPIC_ID", True),
    (104, "INCONSISTENT_CLUSTER_ID", False), (105, "TRANSACTIONAL_ID_NOT_FOUND", False),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True), (107, "INELIGIBLE_REPLICA", False),
    (108, "NEW_LEADER_ELECTED", False), (109, "OFFSET_MOVED_TO_TIERED_STORAGE", False),
    (110, "FENCED_MEMBER_EPOCH", False), (111, "UNRELEASED_INSTANCE_ID", False),
    (112, "UNSUPPORTED_ASSIGNOR", False), (113, "STALE_MEMBER_EPOCH", False),
    (114, "MISMATCHED_ENDPOINT_TYPE", False), (115, "UNSUPPORTED_ENDPOINT_TYPE", False),
    (116, "UNKNOWN_CONTROLLER_ID", False), (117, "UNKNOWN_SUBSCRIPTION_ID", False),
    (118, "TELEMETRY_TOO_LARGE", False), (119, "INVALID_REGISTRATION", False),
    (120, "TRANSACTION_ABORTABLE", False),
    # KIP-932's share groups (Kafka 4.0-4.2).
    (121, "INVALID_RECORD_STATE", False), (122, "SHARE_SESSION_NOT_FOUND", True),
    (123, "INVALID_SHARE_SESSION_EPOCH", True), (124, "FENCED_STATE_EPOCH", False),
    (133, "SHARE_SESSION_LIMIT_REACHED", True),
)

ERROR_CODES: dict[int, KafkaErrorCode] = {c: KafkaErrorCode(c, n, r) for c, n, r in _TABLE}
ERROR_BY_NAME: dict[str, KafkaErrorCode] = {e.name: e for e in ERROR_CODES.values()}


class LogStoreError(Exception):
    """Root of every error logstore raises on purpose."""

    error_name = "UNKNOWN_SERVER_ERROR"

    @property
    def code(self) -> int:
        """The Kafka error code a broker answers with for this error."""
        return ERROR_BY_NAME[self.error_name].code

    @property
    def retriable(self) -> bool:
        """Whether Kafka's Java client treats this error as retriable."""
        return ERROR_BY_NAME[self.error_name].retriable


class CorruptRecordError(LogStoreError):
    """Bytes that are not a well-formed batch; `position` is where it failed.

    `position` is the byte position of the fault within the buffer the caller
    handed to the decoder (or the file, for file readers), or -1 if unknown.
    """

    error_name = "CORRUPT_MESSAGE"

    def __init__(self, message: str, position: int = -1):
        super().__init__(message if position < 0 else f"{message} (at byte {position})")
        self.position = position
        self.reason = message


class InvalidRecordError(CorruptRecordError):
    """A batch whose framing is sound but whose content breaks Kafka's rules."""

    error_name = "INVALID_RECORD"


class InvalidTimestampError(InvalidRecordError):
    """A batch whose timestamps or timestamp type a broker must refuse."""

    error_name = "INVALID_TIMESTAMP"


class UnsupportedCompressionError(CorruptRecordError):
    """A codec id outside 0..4, or a codec not legal for the batch's magic."""

    error_name = "UNSUPPORTED_COMPRESSION_TYPE"


class RecordTooLargeError(CorruptRecordError):
    """A batch larger than the limit the caller set (max.message.bytes)."""

    error_name = "MESSAGE_TOO_LARGE"


class RecordBatchTooLargeError(CorruptRecordError):
    """A batch larger than the partition's segment.bytes: it could never fit in a segment."""

    error_name = "RECORD_LIST_TOO_LARGE"


class StorageError(LogStoreError):
    """A log that cannot be read or written as asked (a file, an index, a closed log)."""

    error_name = "KAFKA_STORAGE_ERROR"


class LogDirLockedError(StorageError):
    """The log dir is held by another open store (its `.lock` file): one process per directory."""


class StorageIOError(StorageError, OSError):
    """An I/O error on a log dir's files: KAFKA_STORAGE_ERROR to a client, and still the `OSError` it was
    (its `errno`, `filename`) to code that catches those.

    `intact` says the failed call left the files as they were (stray bytes of a torn write cut back, a
    temporary file removed): an ENOSPC that is `intact` costs only the call, anything else takes the log
    dir offline (`logstore.log_dir_failures`).
    """

    def __init__(self, message: str, cause: OSError | None = None, *, intact: bool = False):
        OSError.__init__(self, cause.errno if cause is not None else None, message,
                         cause.filename if cause is not None else None)
        self.message = message
        self.intact = intact

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[object, ...]:
        # OSError pickles by its args (errno, message); this keeps the message and the flag.
        return (_rebuild_storage_io_error, (self.message, self.errno, self.filename, self.intact))


def _rebuild_storage_io_error(message: str, errno: int | None, filename: str | None,
                              intact: bool) -> StorageIOError:
    return StorageIOError(message, OSError(errno, message, filename) if errno is not None else None, intact=intact)


class LogDirOfflineError(StorageError):
    """A call on a log dir that an I/O error took offline: its partitions refuse reads and writes until a
    restart recovers them."""


class OffsetOutOfRangeError(LogStoreError):
    """A read or lookup outside [log start offset, log end offset]."""

    error_name = "OFFSET_OUT_OF_RANGE"


class SegmentDeletedError(OffsetOutOfRangeError):
    """A planned read found its segment gone (retention or a cleaner ran since): those offsets are lost."""


class InvalidTopicError(LogStoreError):
    """A topic name Kafka's rules refuse (characters, length, `.` or `..`)."""

    error_name = "INVALID_TOPIC_EXCEPTION"


class TopicExistsError(LogStoreError):
    """A create for a topic that is already there."""

    error_name = "TOPIC_ALREADY_EXISTS"


class UnknownTopicOrPartitionError(LogStoreError):
    """A topic or partition this store does not hold."""

    error_name = "UNKNOWN_TOPIC_OR_PARTITION"
    # The (topic, partition) pairs a multi-partition call refused, when it names them.
    partitions: list[tuple[str, int]] | None = None


class InvalidPartitionsError(LogStoreError):
    """A partition count below 1."""

    error_name = "INVALID_PARTITIONS"


class InvalidConfigError(LogStoreError):
    """A config name that does not exist or a value out of its range."""

    error_name = "INVALID_CONFIG"


class OutOfOrderSequenceError(LogStoreError):
    """An idempotent batch whose first sequence does not follow the producer's last one."""

    error_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(LogStoreError):
    """A batch or marker from a producer epoch older than the one the partition knows."""

    error_name = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(LogStoreError):
    """A write or transaction request the transaction's state does not allow (e.g. a
    plain write inside an open transaction, a commit of an aborting one)."""

    error_name = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(LogStoreError):
    """A marker from a coordinator epoch older than the one that wrote the producer's last marker."""

    error_name = "TRANSACTION_COORDINATOR_FENCED"


class ProducerFencedError(LogStoreError):
    """A transactional producer whose epoch a newer instance (or a timeout) has replaced."""

    error_name = "PRODUCER_FENCED"


class InvalidProducerIdMappingError(LogStoreError):
    """A producer id that is not the one the transactional id holds."""

    error_name = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(LogStoreError):
    """A transaction timeout of 0 or less, or above transaction.max.timeout.ms."""

    error_name = "INVALID_TRANSACTION_TIMEOUT"


class ConcurrentTransactionsError(LogStoreError):
    """The transactional id is between states (markers being written): retry shortly."""

    error_name = "CONCURRENT_TRANSACTIONS"


class CoordinatorNotAvailableError(LogStoreError):
    """The coordinator cannot serve now (its log could not be written, or it is closing)."""

    error_name = "COORDINATOR_NOT_AVAILABLE"


class InvalidRequestError(LogStoreError):
    """A request whose fields make no sense together (e.g. an empty transactional id)."""

    error_name = "INVALID_REQUEST"


class TransactionalIdNotFoundError(LogStoreError):
    """A transactional id the coordinator does not know."""

    error_name = "TRANSACTIONAL_ID_NOT_FOUND"


class CorruptSnapshotError(StorageError):
    """A `.snapshot` file with a bad version, CRC or length."""

    error_name = "CORRUPT_MESSAGE"


class GroupError(LogStoreError):
    """A group coordinator's answer that is not an error in the coordinator: the member or request is at fault."""


class CoordinatorLoadInProgressError(GroupError):
    """The coordinator is still reading its partitions of `__consumer_offsets`: retry shortly."""

    error_name = "COORDINATOR_LOAD_IN_PROGRESS"


class InvalidGroupIdError(GroupError):
    """An empty group id."""

    error_name = "INVALID_GROUP_ID"


class InvalidSessionTimeoutError(GroupError):
    """A session timeout outside group.min.session.timeout.ms..group.max.session.timeout.ms."""

    error_name = "INVALID_SESSION_TIMEOUT"


class InconsistentGroupProtocolError(GroupError):
    """A member's protocol type or protocols have nothing in common with the group's."""

    error_name = "INCONSISTENT_GROUP_PROTOCOL"


class UnknownMemberIdError(GroupError):
    """A member id the group does not have (it expired, left, or never joined)."""

    error_name = "UNKNOWN_MEMBER_ID"


class MemberIdRequiredError(GroupError):
    """A first JoinGroup (v4+): the member must rejoin with the id given here."""

    error_name = "MEMBER_ID_REQUIRED"

    def __init__(self, member_id: str):
        super().__init__(f"rejoin with member id {member_id!r}")
        self.member_id = member_id


class FencedInstanceIdError(GroupError):
    """A static member (group.instance.id) replaced by a newer instance."""

    error_name = "FENCED_INSTANCE_ID"


class IllegalGenerationError(GroupError):
    """A generation id that is not the group's current one."""

    error_name = "ILLEGAL_GENERATION"


class RebalanceInProgressError(GroupError):
    """The group is rebalancing: the member must rejoin."""

    error_name = "REBALANCE_IN_PROGRESS"


class GroupIdNotFoundError(GroupError):
    """A group the coordinator does not have."""

    error_name = "GROUP_ID_NOT_FOUND"


class NonEmptyGroupError(GroupError):
    """The group still has members (it cannot be deleted)."""

    error_name = "NON_EMPTY_GROUP"


class GroupSubscribedToTopicError(GroupError):
    """The group's members consume this topic (its offsets cannot be deleted)."""

    error_name = "GROUP_SUBSCRIBED_TO_TOPIC"


class OffsetMetadataTooLargeError(GroupError):
    """Offset metadata longer than offset.metadata.max.bytes."""

    error_name = "OFFSET_METADATA_TOO_LARGE"


class UnstableOffsetCommitError(GroupError):
    """A transactional offset commit for the partition is not yet committed or aborted."""

    error_name = "UNSTABLE_OFFSET_COMMIT"


class GroupMaxSizeReachedError(GroupError):
    """The group already has group.max.size members."""

    error_name = "GROUP_MAX_SIZE_REACHED"


class FencedMemberEpochError(GroupError):
    """A consumer-group member heartbeating with an epoch the group no longer accepts: it must rejoin."""

    error_name = "FENCED_MEMBER_EPOCH"


class UnreleasedInstanceIdError(GroupError):
    """A static member joining with an instance id another member still holds."""

    error_name = "UNRELEASED_INSTANCE_ID"


class UnsupportedAssignorError(GroupError):
    """A consumer-group member asking for a server-side assignor the broker does not run."""

    error_name = "UNSUPPORTED_ASSIGNOR"


class StaleMemberEpochError(GroupError):
    """An offset commit from a consumer-group member with an epoch that is not its current one."""

    error_name = "STALE_MEMBER_EPOCH"


# KIP-848's regular-expression subscriptions (Kafka 4.0) brought a code after the table's last.
ERROR_CODES[128] = KafkaErrorCode(128, "INVALID_REGULAR_EXPRESSION", False)
ERROR_BY_NAME["INVALID_REGULAR_EXPRESSION"] = ERROR_CODES[128]


class InvalidRegularExpressionError(GroupError):
    """A consumer-group member subscribing with a regular expression that does not compile."""

    error_name = "INVALID_REGULAR_EXPRESSION"


class UnsupportedVersionError(LogStoreError):
    """A request at a version the call does not allow (OffsetCommit below v9 from a KIP-848 member)."""

    error_name = "UNSUPPORTED_VERSION"


class SaslAuthenticationError(LogStoreError):
    """A SASL exchange the broker refuses; the message is what the client is told (Kafka's wording),
    which never says whether the user exists. `reason` is for the broker's log only."""

    error_name = "SASL_AUTHENTICATION_FAILED"

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason if reason is not None else message


class UnsupportedSaslMechanismError(LogStoreError):
    """A SASL mechanism this listener does not serve, or a SCRAM mechanism type Kafka does not know."""

    error_name = "UNSUPPORTED_SASL_MECHANISM"


class IllegalSaslStateError(LogStoreError):
    """A SASL token at a point of the exchange where none is expected."""

    error_name = "ILLEGAL_SASL_STATE"


class UnacceptableCredentialError(LogStoreError):
    """A SCRAM credential Kafka refuses to store: an empty user name, iterations outside 4096..16384."""

    error_name = "UNACCEPTABLE_CREDENTIAL"


class AuthorizationFailedError(LogStoreError):
    """The principal may not perform the operation on the resource (its ACLs, Kafka's authorizer). `names`:
    the resources refused."""

    def __init__(self, message: str, names: tuple[str, ...] = ()):
        super().__init__(message)
        self.names = names


class TopicAuthorizationFailedError(AuthorizationFailedError):
    """Refused on a TOPIC."""

    error_name = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailedError(AuthorizationFailedError):
    """Refused on a GROUP."""

    error_name = "GROUP_AUTHORIZATION_FAILED"


class ClusterAuthorizationFailedError(AuthorizationFailedError):
    """Refused on the CLUSTER."""

    error_name = "CLUSTER_AUTHORIZATION_FAILED"


class TransactionalIdAuthorizationFailedError(AuthorizationFailedError):
    """Refused on a TRANSACTIONAL_ID."""

    error_name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class ShareError(LogStoreError):
    """A share-group call refused (KIP-932)."""


class InvalidRecordStateError(ShareError):
    """An acknowledgement of records this member does not hold (not acquired, or acquired by another)."""

    error_name = "INVALID_RECORD_STATE"


class ShareSessionNotFoundError(ShareError):
    """A share-session epoch other than 0 from a member with no share session on this broker."""

    error_name = "SHARE_SESSION_NOT_FOUND"


class InvalidShareSessionEpochError(ShareError):
    """A share-session epoch that is not the next one of the member's session."""

    error_name = "INVALID_SHARE_SESSION_EPOCH"


class FencedStateEpochError(ShareError):
    """A share-partition state write whose state epoch is older than the stored one."""

    error_name = "FENCED_STATE_EPOCH"


class ShareSessionLimitReachedError(ShareError):
    """A new share session while `group.share.max.share.sessions` are open."""

    error_name = "SHARE_SESSION_LIMIT_REACHED"
