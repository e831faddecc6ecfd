"""The source's options, filter pushdown and rate limits, checked without a Spark session."""
from __future__ import annotations

import datetime as dt

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.datasource import (  # noqa: E402
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from logstore.spark.options import EARLIEST, LATEST, OptionError, parse_options  # noqa: E402
from logstore.spark.planning import Pushdown, push_filters  # noqa: E402
from logstore.spark.stream import _rate_limited  # noqa: E402


def parse(streaming=False, **options):
    return parse_options({"path": "/data", **options}, streaming=streaming)


def test_defaults_follow_spark_except_isolation():
    batch = parse(subscribe="a, b")
    assert batch.subscribe == ("a", "b")
    assert (batch.starting.default, batch.ending.default) == (EARLIEST, LATEST)
    assert batch.isolation == "read_committed"
    assert batch.fail_on_data_loss and not batch.include_headers
    assert parse(streaming=True, subscribe="a").starting.default == LATEST
    assert parse(subscribe="a", **{"kafka.isolation.level": "read_uncommitted"}).isolation == "read_uncommitted"


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of"),
    ({"assign": "[0]"}, "assign must be JSON"),
    ({"subscribePattern": "("}, "not a regular expression"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "cannot be 'latest'"),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "cannot be 'earliest'"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, "at least -2"),
    ({"subscribe": "a", "startingOffsets": "soon"}, "neither 'earliest'"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be at least 1"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
    ({"subscribe": "a", "isolation.level": "read_most"}, "isolation.level"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "closest"}, "'error' or 'latest'"),
])
def test_bad_options_name_the_problem(options, message):
    with pytest.raises(OptionError, match=message):
        parse(**options)


def test_a_path_is_required():
    with pytest.raises(OptionError, match="'path'"):
        parse_options({"subscribe": "a"}, streaming=False)


def test_a_timestamp_for_all_partitions_wins_over_offsets():
    options = parse(subscribe="a", startingTimestamp="1000", startingOffsets='{"a": {"0": 5}}',
                    startingOffsetsByTimestamp='{"a": {"0": 7}}')
    assert (options.starting.default, options.starting.by_timestamp) == (1000, True)
    per_partition = parse(subscribe="a", endingOffsetsByTimestamp='{"a": {"1": 7}}').ending
    assert per_partition.per_partition == {("a", 1): 7} and per_partition.by_timestamp


def test_selection_by_subscribe_pattern_leaves_internal_topics_out():
    options = parse(subscribePattern="(__)?orders.*")
    assert options.selects("orders-eu", 3)
    assert not options.selects("__orders", 0)
    assert not options.selects("xorders", 0)
    assigned = parse(assign='{"a": [1]}')
    assert assigned.selects("a", 1) and not assigned.selects("a", 0)


def test_exact_predicates_are_consumed_and_inexact_ones_returned():
    filters = [EqualTo(("partition",), 2), GreaterThan(("offset",), 10), LessThanOrEqual(("offset",), 50),
               In(("topic",), ("a", "b")), GreaterThanOrEqual(("timestamp",), dt.datetime(2026, 1, 1,
                                                                                         tzinfo=dt.UTC)),
               In(("offset",), (3, 30)), LessThan(("timestamp",), dt.datetime(2027, 1, 1)),
               StringStartsWith(("topic",), "a")]
    pushdown, remaining = push_filters(filters, Pushdown())
    assert remaining == filters[4:]
    assert pushdown.offset_range == (11, 31)
    assert pushdown.partition_range == (2, 3)
    assert pushdown.topics == {"a", "b"}
    assert pushdown.min_timestamp == 1_767_225_600_000
    assert pushdown.admits("a", 2) and not pushdown.admits("a", 1) and not pushdown.admits("c", 2)


def test_partition_sets_and_topic_equalities_intersect():
    pushdown, remaining = push_filters([In(("partition",), (1, 2, 3)), In(("partition",), (2, 3, 4)),
                                        EqualTo(("topic",), "a"), EqualTo(("topic",), "b")], Pushdown())
    assert remaining == []
    assert pushdown.partitions == {2, 3}
    assert pushdown.topics == frozenset()


def test_rate_limit_shares_offsets_in_proportion_and_never_starves_a_partition():
    begin = {("a", 0): 0, ("a", 1): 100, ("a", 2): 0}
    end = {("a", 0): 900, ("a", 1): 200, ("a", 2): 1}
    assert _rate_limited(begin, end, 100) == {("a", 0): 89, ("a", 1): 109, ("a", 2): 1}
    assert _rate_limited(begin, end, 10_000) == end
