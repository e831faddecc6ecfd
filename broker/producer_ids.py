"""The producer-id allocator lives in the storage library (`logstore.producer_ids`), whose own
transactional writers share its id space with the broker; this name stays for the broker's imports."""
from logstore.producer_ids import BLOCK_SIZE, FILE_NAME, ProducerIdAllocator

__all__ = ["BLOCK_SIZE", "FILE_NAME", "ProducerIdAllocator"]
