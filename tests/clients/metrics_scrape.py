"""Reading the broker's metrics endpoint in tests: HTTP GETs and /metrics parsed by prometheus_client."""
from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

TIMEOUT = 30.0    # s, any one client call
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(port: int, path: str) -> tuple[int, bytes]:
    """(status, body) of an HTTP GET on the metrics port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=TIMEOUT) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def scrape(port: int) -> Samples:
    """Every sample of /metrics, parsed by prometheus_client, by (name, labels)."""
    status, body = get(port, "/metrics")
    assert status == 200, body
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode("utf-8")) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (KeyError naming it if absent)."""
    key = (name, frozenset(labels.items()))
    if key not in samples:
        raise KeyError(f"{name}{labels} not scraped; {sorted(n for n, _ in samples if n.startswith(name[:20]))}")
    return samples[key]


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)
