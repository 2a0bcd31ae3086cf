"""The endpoint's Prometheus metrics, in a registry of the app's own (GET /metrics)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# Seconds: the endpoint's budget is a few ms over TF Serving's; 1 ms to 250 ms.
BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("recommend_requests_total", "Recommend requests by HTTP status",
                                ["status"], registry=r)
        self.duration = Histogram("recommend_request_duration_seconds",
                                  "Recommend request latency", buckets=BUCKETS, registry=r)
        self.history_reads = Counter("recommend_history_reads_total",
                                     "History reads from Redis: hit, miss (empty) or error",
                                     ["result"], registry=r)
        self.fallbacks = Counter("recommend_fallbacks_total",
                                 "Answers of the popularity fallback: no_history or redis_error",
                                 ["reason"], registry=r)
        self.tf_serving_duration = Histogram("recommend_tf_serving_duration_seconds",
                                             "TF Serving retrieve call latency (retry included)",
                                             buckets=BUCKETS, registry=r)
        self.tf_serving_errors = Counter("recommend_tf_serving_errors_total",
                                         "Failed TF Serving calls: refused, timeout or status",
                                         ["kind"], registry=r)
