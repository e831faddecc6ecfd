"""logstore: a Kafka-compatible, exactly-once log storage engine.

    import logstore
    with logstore.open("data") as store:
        store.create_topic("orders", partitions=1)
        log = store.log("orders", 0)
        log.append_records([b"hello", b"world"], keys=[b"k1", b"k2"])
        for record in log.iter_records(0):
            print(record.offset, record.key, record.value)
"""
__version__ = "0.1.0"

from logstore.config import LogConfig
from logstore.log import AppendResult, FetchData, Log
from logstore.manager import LogManager, open_store

open = open_store  # noqa: A001 - `logstore.open(path)` reads like gzip.open

__all__ = ["AppendResult", "FetchData", "Log", "LogConfig", "LogManager", "open", "open_store"]
