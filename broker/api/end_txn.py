"""EndTxn (26), v0-5: commit or abort the producer's transaction.

Behavior:
- Answered once the decision is persisted and every partition of the
  transaction (a group's `__consumer_offsets` partition included) has its
  marker on disk: a read_committed consumer then already sees the outcome.
- A retry of an EndTxn that succeeded succeeds again; one that meets the
  markers still being written gets CONCURRENT_TRANSACTIONS.
- v5 is transaction version 2 (KIP-890 part 2), the version the coordinator
  keys the transaction on: the epoch goes up by one at the end of every
  transaction, the markers carry the bumped epoch, and the answer names the
  producer id and epoch to go on with (a new producer id at epoch 0 once
  the epoch is exhausted). A retry is recognised by its epoch, one below the
  answered one, and gets the same answer; an abort with nothing in the
  transaction is allowed (a bump, no markers). v0-4 answer no producer id.

Version notes: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2; v4 only
adds TRANSACTION_ABORTABLE, which EndTxn never answers here. Frames are read
and answered natively (`logstore.native.wire`, kio's bytes): every
transaction ends with one.

Authorization: WRITE on the TRANSACTIONAL_ID (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as Kafka.
"""
from __future__ import annotations

from logstore.broker.api import Request, api
from logstore.broker.api.kit import AclOperation, ResourceType, denied
from logstore.broker.api.txn_calls import durably
from logstore.broker.coordinator.txn_metadata import TV_0, TV_2
from logstore.broker.protocol import EndTxnAnswer, native_decoder, native_encoder
from logstore.native.wire import EndTxnRequest, decode_end_txn, encode_end_txn

KEY = 26
# The first version of transaction version 2 (Kafka's EndTxnRequest: version > 4).
EPOCH_BUMP_FROM = 5


@api(KEY, 0, 5, decode=native_decoder(decode_end_txn, "EndTxn"), encode=native_encoder(encode_end_txn))
async def handle(request: Request, body: EndTxnRequest) -> EndTxnAnswer:
    """End the transaction the way the producer asked."""
    pid, epoch = -1, -1
    error = denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
    if not error:
        client_version = TV_2 if request.version >= EPOCH_BUMP_FROM else TV_0
        outcome = await durably(request, request.broker.transactions.end_transaction_durably,
                                body.transactional_id, body.producer_id, body.producer_epoch, body.committed,
                                client_version)
        error = outcome.error
        if outcome.ok:
            pid, epoch = outcome.result
    # v0-4 have no producer id or epoch: the encoder writes them from v5 only.
    return EndTxnAnswer(0, error, pid, epoch)
