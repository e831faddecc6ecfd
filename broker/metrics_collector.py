"""The broker's Prometheus collector: everything `/metrics` shows, read at scrape time.

Names are Kafka's MBeans as the Prometheus JMX exporter renders them
(`kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t` is
`kafka_server_brokertopicmetrics_messagesin_total{topic="t"}`), consumer lag
as kafka_exporter names it (`kafka_consumergroup_lag`), and `logstore_...`
for what Kafka has no MBean for (transactions by state and their duration,
the group commit's batch size, the cleaner's reclaimed bytes). Kafka has no
messages-out count (a Fetch sends file ranges, unparsed): bytes out per
topic are counted. Rates are Prometheus's `rate()` of the counters.

Counters come from `RequestMetrics` (bumped on the event loop); state that
exists (offsets, sizes, segments, producer ids, groups and their committed
offsets, transactions, fsync and cleaner figures) is read here, in the
scrape's thread, so nothing is counted twice on the produce path. Group
and transaction state is read under the coordinators' locks (a copy, held
briefly); a log's offsets and segments without its lock (one scrape may see
an append half done, never a broken number).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from logstore.broker.api import REGISTRY
from logstore.broker.metrics import TIME_MS_BUCKETS, TXN_MS_BUCKETS, RequestMetrics, api_name
from logstore.durability import BATCH_BUCKETS, SYNC_MS_BUCKETS, SYNC_STATS
from logstore.errors import ERROR_CODES, LogStoreError

if TYPE_CHECKING:
    from logstore.broker.server import Broker

__all__ = ["BrokerCollector"]

_CLASSIC_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
_CONSUMER_STATES = ("empty", "assigning", "reconciling", "stable", "dead")


def _histogram(name: str, documentation: str, bounds: Sequence[float], counts: Sequence[int], total: float,
               labels: Sequence[str] = (), values: Sequence[str] = (), family: HistogramMetricFamily | None = None
               ) -> HistogramMetricFamily:
    """A histogram family (or one more series of `family`) from per-bucket counts, the last above every bound."""
    family = family or HistogramMetricFamily(name, documentation, labels=labels)
    cumulative = list(accumulate(counts))
    buckets = [(_bound(b), float(n)) for b, n in zip(bounds, cumulative)] + [("+Inf", float(cumulative[-1]))]
    family.add_metric(list(values), buckets, total)
    return family


def _bound(value: float) -> str:
    return str(float(value))


class BrokerCollector(Collector):
    """Collects the broker's metrics on each scrape (see the module's docstring); safe from any thread."""

    def __init__(self, broker: Broker, metrics: RequestMetrics):
        self._broker = broker
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        """Every family, request counters first, then the state read now."""
        yield from self._requests()
        yield from self._topics()
        yield from self._listeners()
        yield from self._logs()
        yield from self._durability()
        yield from self._groups()
        yield from self._transactions()
        yield from self._cleaner()

    # -- counted on the loop ---------------------------------------------------------------------

    def _requests(self) -> Iterator[Metric]:
        metrics = self._metrics
        names = {key: api_name(api.name) for key, api in REGISTRY.items()}
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests answered, by API and version (Kafka's RequestMetrics RequestsPerSec)",
                                       labels=["request", "version"])
        for (key, version), count in sorted(dict(metrics.requests).items()):
            requests.add_metric([names.get(key, str(key)), str(version)], count)
        yield requests
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                     "Error codes in answers, by API (Kafka's RequestMetrics ErrorsPerSec)",
                                     labels=["request", "error"])
        for (key, code), count in sorted(dict(metrics.errors).items()):
            known = ERROR_CODES.get(code)
            errors.add_metric([names.get(key, str(key)), known.name if known else str(code)], count)
        yield errors
        times: HistogramMetricFamily | None = None
        sums = dict(metrics.time_sums)
        for key, counts in sorted(dict(metrics.time_counts).items()):
            times = _histogram("kafka_network_requestmetrics_totaltimems",
                               "Time from a request read to its answer made, ms (Kafka's TotalTimeMs)",
                               TIME_MS_BUCKETS, list(counts), sums.get(key, 0.0), ["request"],
                               [names.get(key, str(key))], times)
        if times is not None:
            yield times

    def _topics(self) -> Iterator[Metric]:
        metrics = self._metrics
        # Only topics that exist now: a deleted topic's series end with it, as Kafka removes its topic metrics.
        existing = self._broker.store.topics()
        topics_in = {topic: list(counts) for topic, counts in dict(metrics.topics_in).items() if topic in existing}
        topics_out = {topic: list(counts) for topic, counts in dict(metrics.topics_out).items() if topic in existing}
        per_topic = (
            ("messagesin", "Records appended", topics_in, 0),
            ("bytesin", "Record bytes appended", topics_in, 1),
            ("totalproducerequests", "Produce requests", topics_in, 2),
            ("failedproducerequests", "Produce requests with a refused partition", topics_in, 3),
            ("bytesout", "Record bytes sent to Fetch requests", topics_out, 0),
            ("totalfetchrequests", "Fetch requests", topics_out, 1),
            ("failedfetchrequests", "Fetch requests with a refused partition", topics_out, 2),
        )
        for name, doc, table, index in per_topic:
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", f"{doc}, per topic",
                                         labels=["topic"])
            for topic in sorted(table):
                family.add_metric([topic], table[topic][index])
            yield family
        durations = list(metrics.txn_durations)
        yield _histogram("logstore_transaction_duration_ms",
                         "Time from a transaction's first partition to its completed EndTxn, ms", TXN_MS_BUCKETS,
                         durations, float(metrics.txn_duration_sum_ms))
        yield GaugeMetricFamily("kafka_server_group_coordinator_metrics_group_completed_rebalance_count",
                                "Classic group rebalances completed (a generation formed)",
                                value=metrics.completed_rebalances)
        yield GaugeMetricFamily("kafka_server_group_coordinator_metrics_consumer_group_rebalance_count",
                                "Consumer (KIP-848) group epoch bumps", value=metrics.consumer_rebalances)

    def _listeners(self) -> Iterator[Metric]:
        metrics = self._metrics
        listeners = [listener.name for listener, _, _ in self._broker.bound]
        open_now: dict[str, int] = dict.fromkeys(listeners, 0)
        for connection in list(self._broker.connections):
            name = connection.listener.name
            open_now[name] = open_now.get(name, 0) + 1
        prefix = "kafka_server_socket_server_metrics_"
        count = GaugeMetricFamily(prefix + "connection_count", "Connections open, per listener", labels=["listener"])
        for name in sorted(open_now):
            count.add_metric([name], open_now[name])
        yield count
        for name, doc, table in (("connection_creation", "Connections accepted", metrics.listener_connections),
                                 ("incoming_byte", "Bytes of requests read", metrics.listener_bytes_in),
                                 ("outgoing_byte", "Bytes of answers sent", metrics.listener_bytes_out)):
            family = CounterMetricFamily(prefix + name, f"{doc}, per listener", labels=["listener"])
            seen = dict(table)
            for listener in sorted({*listeners, *seen}):
                family.add_metric([listener], seen.get(listener, 0))
            yield family

    # -- state read now ----------------------------------------------------------------------------

    def _logs(self) -> Iterator[Metric]:
        store = self._broker.store
        labels = ["topic", "partition"]
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "The offset the next append gets", labels=labels)
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "The first offset a read may ask for", labels=labels)
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's segments", labels=labels)
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of the partition", labels=labels)
        producers = 0
        logs = store.logs()
        for (topic, partition), log_ in sorted(logs.items()):
            if log_.closed:
                continue
            values = [topic, str(partition)]
            held = log_.segments
            end.add_metric(values, log_.log_end_offset)
            start.add_metric(values, log_.log_start_offset)
            size.add_metric(values, sum(segment.size for segment in held))
            segments.add_metric(values, len(held))
            producers += len(log_.producers.table)
        yield from (end, start, size, segments)
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount", "Partitions of this broker",
                                value=len(logs))
        yield GaugeMetricFamily("kafka_server_replicamanager_produceridcount",
                                "Producer ids in the partitions' producer state", value=producers)
        yield GaugeMetricFamily("kafka_log_logmanager_offlinelogdirectorycount", "Log dirs taken offline by an I/O "
                                "error", value=len(store.offline_dirs))

    def _durability(self) -> Iterator[Metric]:
        stats = SYNC_STATS
        yield _histogram("kafka_log_logflushstats_logflushrateandtimems", "fsyncs of partition logs and their time, ms",
                         SYNC_MS_BUCKETS, list(stats.time_counts), stats.time_sum_ms)
        yield _histogram("logstore_log_group_commit_batch_size", "Appends each fsync made durable (group commit)",
                         BATCH_BUCKETS, list(stats.batch_counts), float(stats.batch_sum))

    def _groups(self) -> Iterator[Metric]:
        groups = self._broker.groups
        listed = groups.listed_groups()
        kinds = {"classic": 0, "consumer": 0}
        classic = dict.fromkeys(_CLASSIC_STATES, 0)
        consumer = dict.fromkeys(_CONSUMER_STATES, 0)
        for group in listed:
            kinds[group.group_type] = kinds.get(group.group_type, 0) + 1
            if group.group_type == "classic":
                classic[group.state] = classic.get(group.state, 0) + 1
            else:
                consumer[group.state.lower()] = consumer.get(group.state.lower(), 0) + 1
        count = GaugeMetricFamily("kafka_server_group_coordinator_metrics_group_count", "Groups, per protocol",
                                  labels=["protocol"])
        for kind in sorted(kinds):
            count.add_metric([kind], kinds[kind])
        yield count
        by_state = GaugeMetricFamily("kafka_server_group_coordinator_metrics_consumer_group_count",
                                     "Consumer (KIP-848) groups, per state", labels=["state"])
        for state in sorted(consumer):
            by_state.add_metric([state], consumer[state])
        yield by_state
        yield GaugeMetricFamily("kafka_server_groupmetadatamanager_numgroups", "Classic groups",
                                value=kinds["classic"])
        for state in sorted(classic):
            yield GaugeMetricFamily(f"kafka_server_groupmetadatamanager_numgroups{state.lower()}",
                                    f"Classic groups in state {state}", value=classic[state])
        yield from self._lag(sorted(group.group_id for group in listed))

    def _lag(self, group_ids: list[str]) -> Iterator[Metric]:
        store = self._broker.store
        logs = store.logs()
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "A group's committed offset, per partition",
                                    labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Log end offset minus the group's committed offset",
                                labels=labels)
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "A group's lag over every partition",
                                    labels=["consumergroup"])
        offsets = 0
        for group_id in group_ids:
            try:
                committed = self._broker.groups.fetch_offsets(group_id, None)
            except LogStoreError:
                continue   # gone meanwhile
            total = 0
            for (topic, partition), offset in sorted(committed.items()):
                log_ = logs.get((topic, partition))
                if log_ is None or offset is None or isinstance(offset, LogStoreError):
                    continue
                offsets += 1
                values = [group_id, topic, str(partition)]
                behind = log_.log_end_offset - offset.offset
                current.add_metric(values, offset.offset)
                lag.add_metric(values, behind)
                total += behind
            lag_sum.add_metric([group_id], total)
        yield from (current, lag, lag_sum)
        yield GaugeMetricFamily("kafka_server_groupmetadatamanager_numoffsets", "Committed offsets of every group",
                                value=offsets)

    def _transactions(self) -> Iterator[Metric]:
        by_state: dict[str, int] = {}
        for meta in self._broker.transactions.transactions():
            name = meta.state.kafka_name
            by_state[name] = by_state.get(name, 0) + 1
        family = GaugeMetricFamily("logstore_transaction_coordinator_transactional_ids",
                                   "Transactional ids, per state of their transaction", labels=["state"])
        for state in ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                      "Dead", "PrepareEpochFence"):
            family.add_metric([state], by_state.get(state, 0))
        yield family

    def _cleaner(self) -> Iterator[Metric]:
        store = self._broker.store
        cleaner = store.cleaner
        ratio = GaugeMetricFamily("logstore_log_cleaner_dirty_ratio", "A compacted partition's dirty share of bytes",
                                  labels=["topic", "partition"])
        highest = 0.0
        for (topic, partition), log_ in sorted(store.logs().items()):
            if log_.closed or not log_.config.compacts:
                continue
            dirty = cleaner.dirty_ratio(log_)
            highest = max(highest, dirty)
            ratio.add_metric([topic, str(partition)], dirty)
        yield ratio
        yield GaugeMetricFamily("kafka_log_logcleanermanager_max_dirty_percent",
                                "The dirtiest compacted partition's dirty share, percent", value=highest * 100)
        uncleanable = GaugeMetricFamily("kafka_log_logcleanermanager_uncleanable_partitions_count",
                                        "Partitions the cleaner gave up on, per log dir", labels=["logDirectory"])
        for log_dir in store.log_dirs:
            uncleanable.add_metric([log_dir], len(cleaner.uncleanable_partitions(log_dir)))
        yield uncleanable
        yield CounterMetricFamily("logstore_log_cleaner_rounds", "Cleaner rounds that cleaned a partition",
                                  value=cleaner.cleanings)
        yield CounterMetricFamily("logstore_log_cleaner_bytes_reclaimed", "Bytes the cleaner's rounds freed",
                                  value=cleaner.bytes_reclaimed)
