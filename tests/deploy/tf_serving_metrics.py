"""TF Serving 2.16.1's Prometheus metrics, as its exporter writes them, for tests that feed a real
Prometheus synthetic series.

Every name and label here is cited to tensorflow_serving/ at tag 2.16.1 (github.com/tensorflow/
serving); METRICS is the list the alert rules, the dashboard and the canary analysis are checked
against (test_rollout_analysis.py), so a query naming a series TF Serving does not export fails.
"""

from __future__ import annotations

import dataclasses
import re

# prometheus_exporter.cc:57: every character of the internal name outside [a-zA-Z0-9_] becomes
# ':'; label names (prometheus_exporter.cc:45) get '_' instead.


def exported_name(internal: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", ":", internal)


@dataclasses.dataclass(frozen=True)
class Metric:
    internal: str  # the name TF Serving registers
    kind: str  # counter | histogram (Sampler)
    labels: tuple[str, ...]
    source: str  # where it is defined, file:line at tag 2.16.1

    @property
    def name(self) -> str:
        return exported_name(self.internal)

    def series_names(self) -> set[str]:
        """The names it appears under in a scrape: a Sampler as NAME_bucket{...,le}, NAME_sum,
        NAME_count (prometheus_exporter.cc:68-109)."""
        if self.kind == "histogram":
            return {self.name + suffix for suffix in ("_bucket", "_sum", "_count")}
        return {self.name}

    def series_labels(self, series: str) -> set[str]:
        return set(self.labels) | ({"le"} if series.endswith("_bucket") else set())


METRICS = [
    Metric("/tensorflow/serving/request_count", "counter", ("model_name", "status"),
           "tensorflow_serving/servables/tensorflow/util.cc:66-68 (incremented at 117-121, "
           "status = error::Code_Name, e.g. OK, INVALID_ARGUMENT)"),
    Metric("/tensorflow/serving/request_latency", "histogram", ("model_name", "API", "entrypoint"),
           "tensorflow_serving/servables/tensorflow/util.cc:80-88 (recorded at 356-358; only for "
           "successful requests: model_servers/http_server.cc:194-197, "
           "prediction_service_impl.cc:52-55)"),
    Metric("/tensorflow/serving/runtime_latency", "histogram", ("model_name", "API", "runtime"),
           "tensorflow_serving/servables/tensorflow/util.cc:70-78 (recorded at 351-353)"),
    Metric("/tensorflow/cc/saved_model/load_attempt_count", "counter", ("model_path", "status"),
           "tensorflow/cc/saved_model/loader.cc (TensorFlow 2.16, linked into the server; status "
           "\"success\" or \"fail\")"),
    Metric("/tensorflow/serving/model_warmup_latency", "histogram", ("model_path", "status"),
           "tensorflow_serving/servables/tensorflow/saved_model_warmup_util.cc:40-47"),
]
BY_SERIES = {series: metric for metric in METRICS for series in metric.series_names()}
# Prometheus' own series, not TF Serving's.
PROMETHEUS_SERIES = {"up"}

# util.cc:87: Buckets::Exponential(10, 1.8, 33): limits 10 * 1.8^i us, i < 33, then the exporter's
# "+Inf" (prometheus_exporter.cc:95-98); a limit is printed by absl::StrCat(double), six
# significant digits ("%.6g").
LATENCY_BUCKETS_US = [10 * 1.8 ** i for i in range(33)]


def bucket_label(limit: float) -> str:
    return f"{limit:.6g}"


# REST methods (http_rest_api_handler.cc:86-95) and gRPC ones (prediction_service_impl.cc:53, 93,
# 122) of the inference APIs; a model status probe (GET /v1/models/<name>) has API="".
REST_APIS = ("predict", "classify", "regress")
GRPC_APIS = ("Predict", "Classify", "Regress")


def _labels(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"


@dataclasses.dataclass
class PodTraffic:
    """What one server has answered so far: cumulative counts, as its counters hold them."""

    model_name: str
    ok: float = 0  # successful inference requests
    errors: dict = dataclasses.field(default_factory=dict)  # status -> count
    probes: float = 0  # model status requests (OK)
    # (fraction, latency in us) of the successful inference requests
    latency_profile: tuple = ((1.0, 1000.0),)
    probe_latency_us: float = 300.0
    api: str = "predict"

    def exposition(self) -> str:
        """The scrape body, line for line as prometheus_exporter.cc writes it (one TYPE line per
        metric, then its points; labels in the order the metric declares them)."""
        lines = []
        name = exported_name("/tensorflow/serving/request_count")
        lines.append(f"# TYPE {name} counter")
        statuses = {"OK": self.ok + self.probes, **self.errors}
        for status, count in statuses.items():
            lines.append(f"{name}{_labels([('model_name', self.model_name), ('status', status)])}"
                         f" {count:g}")
        name = exported_name("/tensorflow/serving/request_latency")
        lines.append(f"# TYPE {name} histogram")
        points = [(self.api, self.ok, self.latency_profile),
                  ("", self.probes, ((1.0, self.probe_latency_us),))]
        for api, count, profile in points:
            labels = [("model_name", self.model_name), ("API", api), ("entrypoint", "REST")]
            for limit in LATENCY_BUCKETS_US:
                below = sum(f for f, latency in profile if latency <= limit) * count
                lines.append(f"{name}_bucket{_labels(labels + [('le', bucket_label(limit))])}"
                             f" {round(below)}")
            lines.append(f"{name}_bucket{_labels(labels + [('le', '+Inf')])} {round(count)}")
            total = sum(f * latency for f, latency in profile) * count
            lines.append(f"{name}_sum{_labels(labels)} {total:g}")
            lines.append(f"{name}_count{_labels(labels)} {round(count)}")
        return "\n".join(lines) + "\n"


def scraped_samples(exposition: str, target_labels: dict, timestamp: float) -> list[str]:
    """The samples Prometheus stores from a scrape: each exposition line with the target's labels
    (job, instance and the relabelled pod labels) added, at `timestamp` (OpenMetrics sample lines
    for `promtool tsdb create-blocks-from openmetrics`; TYPE lines are dropped, OpenMetrics would
    want counters named *_total)."""
    extra = ",".join(f'{k}="{v}"' for k, v in target_labels.items())
    out = []
    for line in exposition.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, brace, rest = series.partition("{")
        labels = rest[:-1] + "," + extra if brace else extra
        out.append(f"{name}{{{labels}}} {value} {timestamp:.3f}")
    return out


SERIES_IN_PROMQL = re.compile(r"(?<![\w:])(:?[a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")


def selected_series(promql: str) -> list[tuple[str, set[str]]]:
    """(series name, label names matched) for every `name{...}` selector in a query."""
    found = []
    for name, matchers in SERIES_IN_PROMQL.findall(promql):
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
        found.append((name, labels))
    return found
