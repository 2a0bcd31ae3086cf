"""The request metrics TF Serving counts, for both stand-ins (REST and gRPC), exported as its
Prometheus endpoint writes them (GET /monitoring/prometheus/metrics on the REST port:
util/prometheus_exporter.cc kPrometheusPath; a metric's '/' becomes ':').

At 2.16.1 and 2.20.0 (servables/tensorflow/util.cc): every call counts in
/tensorflow/serving/request_count{model_name, status} (RecordModelRequestCount, status the
absl code's name: "OK", "NOT_FOUND", ...), and a call that succeeded adds its wall time in
microseconds to /tensorflow/serving/request_latency{model_name, API, entrypoint} (buckets:
Exponential(10, 1.8, 33)); the entrypoint is "GRPC" in model_servers/prediction_service_impl.cc
(API "Predict", "Classify", "Regress") and "REST" in model_servers/http_server.cc (API the REST
method, "predict").
"""
from __future__ import annotations

import threading
from collections import Counter
from typing import Dict, List, Tuple

BUCKETS: List[float] = [10 * 1.8 ** i for i in range(33)]  # monitoring::Buckets::Exponential


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.request_count: Counter = Counter()  # (model_name, status) -> count
        self._latency: Dict[Tuple[str, str, str], List[float]] = {}

    def record(self, model_name: str, status: str, api: str, entrypoint: str,
               latency_us: float) -> None:
        with self._lock:
            self.request_count[(model_name, status)] += 1
            if status == "OK":  # only a call that succeeded records its latency
                self._latency.setdefault((model_name, api, entrypoint), []).append(latency_us)

    def prometheus(self) -> str:
        lines = ["# TYPE :tensorflow:serving:request_count counter"]
        with self._lock:
            for (model, status), count in sorted(self.request_count.items()):
                lines.append(f':tensorflow:serving:request_count{{model_name="{model}",'
                             f'status="{status}"}} {count}')
            lines.append("# TYPE :tensorflow:serving:request_latency histogram")
            for (model, api, entrypoint), samples in sorted(self._latency.items()):
                labels = f'model_name="{model}",API="{api}",entrypoint="{entrypoint}"'
                for bound in BUCKETS:
                    below = sum(1 for s in samples if s <= bound)
                    lines.append(f':tensorflow:serving:request_latency_bucket{{{labels},'
                                 f'le="{bound:g}"}} {below}')
                lines.append(f':tensorflow:serving:request_latency_bucket{{{labels},le="+Inf"}} '
                             f"{len(samples)}")
                lines.append(f":tensorflow:serving:request_latency_sum{{{labels}}} {sum(samples)}")
                lines.append(f":tensorflow:serving:request_latency_count{{{labels}}} "
                             f"{len(samples)}")
        return "\n".join(lines) + "\n"
