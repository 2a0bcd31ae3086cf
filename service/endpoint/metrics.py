"""The endpoint's Prometheus metrics, in a registry of the app's own (GET /metrics)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
        # reason: the answer's fallback_reason, a closed set (request.FALLBACK_REASONS).
        self.fallbacks = Counter("recommend_fallbacks_total",
                                 "Answers of the popularity fallback by reason: anonymous, "
                                 "no_history, "
                                 "redis_error, tf_serving_timeout, tf_serving_refused, "
                                 "tf_serving_error, circuit_open", ["reason"], registry=r)
        self.tf_serving_duration = Histogram("recommend_tf_serving_duration_seconds",
                                             "TF Serving retrieve call latency (retry included)",
                                             buckets=BUCKETS, registry=r)
        self.tf_serving_errors = Counter("recommend_tf_serving_errors_total",
                                         "Failed TF Serving calls: refused, timeout, status "
                                         "(an HTTP error) or answer (no retrieve answer)",
                                         ["kind"], registry=r)
        # outcome: service/request_log.py OUTCOMES, a closed set.
        self.request_log_records = Counter("recommend_request_log_records_total",
                                           "Sampled request-log records by outcome: sent, "
                                           "dropped_queue_full, dropped_delivery_failed "
                                           "(a broker slow or away), dropped_error",
                                           ["outcome"], registry=r)
        self.tf_serving_circuit = Gauge("recommend_tf_serving_circuit_state",
                                        "TF Serving's circuit breaker: 0 closed, 1 half-open "
                                        "(one probe call), 2 open (no calls: the fallback)",
                                        registry=r)
