"""The coordinators: network-free state machines over Kafka's internal topics.

They are clients of the store like any embedding application: they append
batches to internal partitions and read them back when they start. The
broker's handlers and the in-process clients drive the very same objects.
"""
