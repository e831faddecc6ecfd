"""Share groups (KIP-932, Kafka's queues): share-partition state, its durable copy in
`__share_group_state`, and the ShareFetch/ShareAcknowledge path over them."""
