"""The canary analysis (deploy/serving/k8s/rollout/common/analysis-template.yaml) decided by a real
Prometheus over synthetic TF Serving series, the way Argo Rollouts v1.9.1 decides it.

The series are scrapes of a stable revision (2 pods) and a canary (1 pod), each body written line
for line as TF Serving 2.16.1's exporter writes it (tests/deploy/tf_serving_metrics.py), with the
labels the cluster scrape job adds (prometheus/prometheus-kubernetes.yml), stored by
`promtool tsdb create-blocks-from openmetrics` and queried through a Prometheus server on
loopback by the template's own queries with Argo's argument substitution. Each measurement's phase
follows metricproviders/prometheus/prometheus.go (processResponse: a vector's values as
`result`) and utils/evaluate/evaluate.go (EvaluateResult: success and failure conditions, neither
true = Inconclusive) at argo-rollouts v1.9.1; the conditions in the template are held to the
one form evaluated here (`result[0] <op> <number>`, or "false").
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import dump_yaml, load_yaml
from tests.deploy import tf_serving_metrics as tfs
from tests.deploy.test_rollout import VARIANTS, variant_object
from tests.deploy.test_serving_artifacts import (
    DASHBOARD,
    MODEL_NAME,
    PROMETHEUS,
    output,
    run,
    tool,
)

STEP_S = 15  # the scrape interval
DURATION_S = 20 * 60
START_S = 1_780_000_000  # any fixed time: Prometheus' retention counts from the newest block
END_S = START_S + DURATION_S

# Latency profiles: (fraction of successful inference requests, latency in us).
FAST = ((0.90, 15_000.0), (0.095, 40_000.0), (0.005, 80_000.0))  # P99 ~ 66 ms
VERY_FAST = ((0.99, 2_000.0), (0.01, 4_000.0))  # P99 ~ 4 ms
SLOWER = ((0.90, 15_000.0), (0.10, 60_000.0))  # P99 ~ 65 ms: within the SLO, not stable's
SLOW = ((0.50, 40_000.0), (0.50, 150_000.0))  # P99 ~ 216 ms
PROBES_PER_S = 1 / 10 + 1 / 20  # readiness every 10 s, liveness every 20 s (the Rollout's probes)

# name: (stable: requests/s for all its pods, error share, profile;
#        canary: requests/s, {status: share}, profile)
SCENARIOS = {
    "healthy": ((95, {"INVALID_ARGUMENT": 0.001}, FAST),
                (5, {"INVALID_ARGUMENT": 0.002}, FAST)),
    "errors-3pct": ((95, {"INVALID_ARGUMENT": 0.001}, FAST),
                    (5, {"INTERNAL": 0.02, "INVALID_ARGUMENT": 0.01}, FAST)),
    "slow": ((95, {"INVALID_ARGUMENT": 0.001}, FAST),
             (5, {"INVALID_ARGUMENT": 0.001}, SLOW)),
    "slower-than-stable": ((95, {"INVALID_ARGUMENT": 0.001}, VERY_FAST),
                           (5, {"INVALID_ARGUMENT": 0.001}, SLOWER)),
    # 0.5 requests/s: 150 in the 5-minute window, fewer than min-requests (200); the probes'
    # 45 more would not count even if they reached it.
    "too-little-traffic": ((95, {"INVALID_ARGUMENT": 0.001}, FAST),
                           (0.5, {"INVALID_ARGUMENT": 0.5}, FAST)),
}
EXPECTED = {
    "healthy": ("Successful", {"inference-requests": "Successful", "error-ratio": "Successful",
                               "p99-latency-ms": "Successful",
                               "p99-latency-vs-stable": "Successful"}),
    "errors-3pct": ("Failed", {"inference-requests": "Successful", "error-ratio": "Failed",
                               "p99-latency-ms": "Successful",
                               "p99-latency-vs-stable": "Successful"}),
    "slow": ("Failed", {"inference-requests": "Successful", "error-ratio": "Successful",
                        "p99-latency-ms": "Failed", "p99-latency-vs-stable": "Failed"}),
    "slower-than-stable": ("Failed", {"inference-requests": "Successful",
                                      "error-ratio": "Successful",
                                      "p99-latency-ms": "Successful",
                                      "p99-latency-vs-stable": "Failed"}),
    "too-little-traffic": ("Inconclusive", {"inference-requests": "Inconclusive",
                                            "error-ratio": "Inconclusive",
                                            "p99-latency-ms": "Inconclusive",
                                            "p99-latency-vs-stable": "Inconclusive"}),
}


def hashes(scenario: str) -> tuple[str, str]:
    """(stable, canary) rollouts-pod-template-hash of a scenario (each has its own revisions)."""
    return f"{scenario}-stable", f"{scenario}-canary"


def pods(scenario: str) -> list[tuple[dict, tfs.PodTraffic, float, dict]]:
    """(target labels, traffic at t=0, requests/s, error shares) per pod."""
    (s_rps, s_err, s_profile), (c_rps, c_err, c_profile) = SCENARIOS[scenario]
    stable, canary = hashes(scenario)
    out = []
    for revision, replicas, rps, errors, profile, version in (
            (stable, 2, s_rps, s_err, s_profile, "1717171717"),
            (canary, 1, c_rps, c_err, c_profile, "1717258117")):
        for i in range(replicas):
            pod = f"tf-serving-{revision}-{i}"
            labels = {"job": "tf-serving", "instance": f"10.0.{len(out)}.{i}:8501",
                      "namespace": "serving", "pod": pod,
                      "rollouts_pod_template_hash": revision, "model_version": version}
            out.append((labels, tfs.PodTraffic(MODEL_NAME, latency_profile=profile),
                        rps / replicas, errors))
    return out


def openmetrics() -> str:
    lines = []
    for scenario in SCENARIOS:
        per_pod = pods(scenario)
        # Samples of one series must be in time order: all of a pod's scrapes, pod by pod,
        # series by series.
        for labels, traffic, rps, errors in per_pod:
            by_series: dict[str, list[str]] = {}
            for t in range(0, DURATION_S + 1, STEP_S):
                traffic.ok = rps * t * (1 - sum(errors.values()))
                traffic.errors = {s: rps * t * share for s, share in errors.items()}
                traffic.probes = PROBES_PER_S * t
                for sample in tfs.scraped_samples(traffic.exposition(), labels, START_S + t):
                    by_series.setdefault(sample.rsplit(" ", 2)[0], []).append(sample)
            for samples in by_series.values():
                lines += samples
    return "\n".join(lines) + "\n# EOF\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def prometheus_over(work: Path, series: str, at: float = END_S):
    """A Prometheus server on loopback over `series` (OpenMetrics sample lines, # EOF ended),
    stored by promtool as blocks; yields query(promql, at=at) -> the instant query's JSON `data`
    at that time (what Argo asks at a measurement)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: run scripts/install_test_tools.sh (the Debian package "
                    "prometheus)")
    (work / "series.om").write_text(series)
    data = work / "data"
    proc = run([tool("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                str(work / "series.om"), str(data)])
    assert proc.returncode == 0, output(proc)
    (work / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    server = subprocess.Popen(
        [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y"],
        stdout=subprocess.DEVNULL, stderr=(work / "log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail(f"prometheus did not start: {(work / 'log').read_text()[-2000:]}")

        def query(promql: str, at: float = at) -> dict:
            params = urllib.parse.urlencode({"query": promql, "time": at})
            with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=30) as response:
                body = json.load(response)
            assert body["status"] == "success", body
            return body["data"]

        yield query
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """Prometheus over the synthetic scenarios, queried at their end."""
    with prometheus_over(tmp_path_factory.mktemp("prometheus"), openmetrics()) as query:
        yield query


# --------------------------------------------------------------------------------------------
# Argo Rollouts' evaluation

CONDITION = re.compile(r"^result\[0\] (<=|>=|<|>) (\S+)$")
OPERATORS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


def resolve(text: str, args: dict) -> str:
    """utils/template/template.go ResolveArgs: {{args.<name>}} replaced by the argument's value."""
    def value(match):
        return args[match.group(1)]
    return re.sub(r"\{\{\s*args\.([\w-]+)\s*\}\}", value, text)


def template_args(template: dict, scenario: str, **overrides) -> dict:
    stable, canary = hashes(scenario)
    args = {a["name"]: a.get("value") for a in template["spec"]["args"]}
    args.update({"canary-hash": canary, "stable-hash": stable}, **overrides)
    assert None not in args.values(), args
    return args


def condition_true(condition: str, result: list[float]) -> bool:
    if condition == "false":
        return False
    found = CONDITION.match(condition)
    assert found, f"{condition!r}: not a form this test evaluates"
    if not result:  # expr: index out of range; the measurement is an Error
        raise IndexError(condition)
    return OPERATORS[found.group(1)](result[0], float(found.group(2)))


def phase(metric: dict, result: list[float]) -> str:
    """evaluate.go EvaluateResult, for metrics with both conditions (all of the template's)."""
    try:
        success = condition_true(metric["successCondition"], result)
        failure = condition_true(metric["failureCondition"], result)
    except IndexError:
        return "Error"
    if failure:
        return "Failed"
    return "Successful" if success else "Inconclusive"


def verdict(phases: dict) -> str:
    for worst in ("Failed", "Error", "Inconclusive"):
        if worst in phases.values():
            return worst
    return "Successful"


def measure(query, template: dict, args: dict) -> tuple[dict, dict]:
    """Each metric's phase and value at one measurement."""
    phases, values = {}, {}
    for metric in template["spec"]["metrics"]:
        resolved = json.loads(resolve(json.dumps(metric), args))
        data = query(resolved["provider"]["prometheus"]["query"])
        assert data["resultType"] == "vector", data
        result = [float(sample["value"][1]) for sample in data["result"]]
        phases[metric["name"]] = phase(resolved, result)
        values[metric["name"]] = result
    return phases, values


def analysis_template() -> dict:
    return variant_object("istio", "AnalysisTemplate")


# --------------------------------------------------------------------------------------------
# tests


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_synthetic_canary_gets_its_verdict(prometheus, scenario):
    template = analysis_template()
    phases, values = measure(prometheus, template, template_args(template, scenario))
    expected_verdict, expected_phases = EXPECTED[scenario]
    assert phases == expected_phases, values
    assert verdict(phases) == expected_verdict


def test_the_measured_values_are_the_series(prometheus):
    """What the healthy canary's measurements are, from the synthetic rates: 5 requests/s over
    the 5-minute window, 0.2% errors, P99 inside the 37.5-67.5 ms bucket."""
    template = analysis_template()
    _, values = measure(prometheus, template, template_args(template, "healthy"))
    (requests,) = values["inference-requests"]
    assert requests == pytest.approx(5 * 300, rel=0.06)  # increase() extrapolates to the window
    (ratio,) = values["error-ratio"]
    assert ratio == pytest.approx(0.002, rel=0.05)
    (p99,) = values["p99-latency-ms"]
    assert 37.48 < p99 < 67.47
    (factor,) = values["p99-latency-vs-stable"]
    assert factor == pytest.approx(1.0, abs=0.01)
    _, values = measure(prometheus, template, template_args(template, "too-little-traffic"))
    assert all(math.isnan(v[0]) for name, v in values.items() if name != "inference-requests")


def test_thresholds_decide_not_the_query_shape(prometheus):
    """Negative controls: the same data with looser or stricter arguments changes the verdict."""
    template = analysis_template()
    phases, _ = measure(prometheus, template,
                        template_args(template, "errors-3pct", **{"max-error-ratio": "0.05"}))
    assert verdict(phases) == "Successful"
    phases, _ = measure(prometheus, template,
                        template_args(template, "too-little-traffic", **{"min-requests": "100"}))
    assert phases["inference-requests"] == "Successful"
    assert phases["error-ratio"] == "Failed"  # half of its requests fail
    phases, _ = measure(prometheus, template,
                        template_args(template, "healthy", **{"p99-slo-ms": "50"}))
    assert phases["p99-latency-ms"] == "Failed"


def test_probes_are_not_inference_requests(prometheus):
    """The status probes are in request_count (as OK) and in request_latency with API="": the
    analysis must not count them. Without the API filter the low-traffic canary would have its
    probes' 45 requests added."""
    stable, canary = hashes("too-little-traffic")
    data = prometheus(
        f'sum(increase(:tensorflow:serving:request_latency_count{{model_name="{MODEL_NAME}", '
        f'API="", rollouts_pod_template_hash="{canary}"}}[5m]))')
    (sample,) = data["result"]
    assert float(sample["value"][1]) == pytest.approx(PROBES_PER_S * 300, rel=0.06)


def test_every_condition_is_one_this_test_evaluates():
    for metric in analysis_template()["spec"]["metrics"]:
        for key in ("successCondition", "failureCondition"):
            condition = resolve(metric[key], template_args(analysis_template(), "healthy"))
            assert condition == "false" or CONDITION.match(condition), (metric["name"], key)


def test_measurements_start_after_a_whole_window():
    template = analysis_template()
    window = template_args(template, "healthy")["window"]
    for metric in template["spec"]["metrics"]:
        assert metric["initialDelay"] == window, metric["name"]


# --------------------------------------------------------------------------------------------
# every query names TF Serving's real series


def queries() -> dict[str, str]:
    """Every PromQL query of the serving files: alert rules, dashboard, canary analysis."""
    found = {}
    for group in load_yaml((PROMETHEUS / "alerts.yml").read_text())["groups"]:
        for rule in group["rules"]:
            found[f"alerts.yml {rule.get('alert', rule.get('record'))}"] = rule["expr"]
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for i, target in enumerate(panel.get("targets", [])):
            found[f"dashboard {panel['title']} #{i}"] = target["expr"]
    for variant in VARIANTS:
        for metric in variant_object(variant, "AnalysisTemplate")["spec"]["metrics"]:
            found[f"{variant} analysis {metric['name']}"] = metric["provider"]["prometheus"][
                "query"]
    return found


# Labels Prometheus adds at scrape (the job's target and relabelled pod labels).
SCRAPE_LABELS = {"job", "instance", "namespace", "pod", "rollouts_pod_template_hash",
                 "model_version"}


def unknown_series(promql: str) -> list[str]:
    problems = []
    for name, labels in tfs.selected_series(promql):
        if name in tfs.PROMETHEUS_SERIES:
            continue
        metric = tfs.BY_SERIES.get(name)
        if metric is None:
            problems.append(f"{name}: not a series TF Serving 2.16.1 exports")
            continue
        extra = labels - metric.series_labels(name) - SCRAPE_LABELS
        if extra:
            problems.append(f"{name}: no label {sorted(extra)} (it has {sorted(metric.labels)})")
    return problems


def test_alerts_dashboard_and_analysis_name_only_real_series():
    found = queries()
    assert len(found) > 10
    assert any("analysis" in k for k in found) and any("dashboard" in k for k in found)
    problems = {where: unknown_series(q) for where, q in found.items()}
    assert {k: v for k, v in problems.items() if v} == {}
    # Every query selects at least one series (the regex saw them).
    assert all(tfs.selected_series(q) for q in found.values())


@pytest.mark.parametrize("broken, problem", [
    (':tensorflow:serving:request_latency_ms_bucket{model_name="m"}', "not a series"),
    (':tensorflow:serving:request_count{model_name="m", version="1"}', "no label ['version']"),
    ('tensorflow_serving_request_count{model_name="m"}', "not a series"),
    (':tensorflow:serving:request_latency_count{model_name="m", le="+Inf"}', "no label ['le']"),
])
def test_series_check_catches_a_made_up_name_or_label(broken, problem):
    problems = unknown_series(f"sum(rate({broken}[5m]))")
    assert problems and problem in problems[0], problems


def test_the_synthetic_scrape_is_shaped_as_the_exporter_writes_it():
    body = tfs.PodTraffic(MODEL_NAME, ok=10, errors={"INTERNAL": 1}, probes=2).exposition()
    lines = body.splitlines()
    assert "# TYPE :tensorflow:serving:request_count counter" in lines
    assert f':tensorflow:serving:request_count{{model_name="{MODEL_NAME}",status="OK"}} 12' in lines
    bucket = [line for line in lines if "_bucket" in line and 'API="predict"' in line]
    assert len(bucket) == 34  # 33 limits and +Inf
    assert bucket[0].split("{", 1)[1].startswith(
        f'model_name="{MODEL_NAME}",API="predict",entrypoint="REST",le="10"}}')
    assert 'le="1.27482e+06"' in bucket[20] and bucket[-1].endswith('le="+Inf"} 10')


def test_the_rollouts_scrape_job_relabels_what_the_analysis_selects():
    """prometheus-kubernetes.yml's relabelings produce the labels the analysis selects on."""
    config = load_yaml((PROMETHEUS / "prometheus-kubernetes.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "tf-serving"]
    targets = {r["target_label"]: r["source_labels"] for r in job["relabel_configs"]
               if "target_label" in r}
    assert targets["rollouts_pod_template_hash"] == [
        "__meta_kubernetes_pod_label_rollouts_pod_template_hash"]
    version_label = "tf-serving/model-version"
    meta = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", version_label)
    assert targets["model_version"] == [meta]
    assert Path(PROMETHEUS / config["rule_files"][0]).exists()


@pytest.mark.slow
def test_the_scrape_job_labels_each_series_with_its_revision_and_version(tmp_path):
    """prometheus-kubernetes.yml's tf-serving job, run by a real Prometheus: Debian's build has no
    Kubernetes discovery, so its targets are static ones carrying the __meta_kubernetes_* labels
    that discovery would set for a rollout pod (and one for another app, which the job must
    drop). The scraped body is an exporter-shaped TF Serving scrape served on loopback."""
    import http.server
    import threading

    body = tfs.PodTraffic(MODEL_NAME, ok=10, errors={"INTERNAL": 1}, probes=2).exposition()

    class Metrics(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            data = body.encode() if self.path == "/monitoring/prometheus/metrics" else b""
            self.send_response(200 if data else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(data)

    exporter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    config = load_yaml((PROMETHEUS / "prometheus-kubernetes.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "tf-serving"]
    assert "kubernetes_sd_configs" in job
    del job["kubernetes_sd_configs"]
    meta = "__meta_kubernetes_"
    pod = {f"{meta}pod_label_app_kubernetes_io_name": "tf-serving",
           f"{meta}pod_container_port_name": "http", f"{meta}namespace": "serving",
           f"{meta}pod_name": "tf-serving-x-7d9f-abcde",
           f"{meta}pod_label_rollouts_pod_template_hash": "7d9f",
           f"{meta}pod_label_tf_serving_model_version": "1717258117"}
    target = f"127.0.0.1:{exporter.server_address[1]}"
    job["static_configs"] = [{"targets": [target], "labels": pod},
                             {"targets": [target], "labels": {
                                 **pod, f"{meta}pod_label_app_kubernetes_io_name": "other",
                                 f"{meta}pod_name": "other"}}]
    job["scrape_interval"] = "1s"
    config["rule_files"] = []
    # This job alone: the others (the recommender service's, dcgm-exporter) discover pods too.
    config["scrape_configs"] = [job]
    (tmp_path / "prometheus.yml").write_text(dump_yaml(config))
    proc = run([tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")])
    assert proc.returncode == 0, output(proc)
    port = free_port()
    server = subprocess.Popen(
        [shutil.which("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        query = urllib.parse.urlencode({"query": ":tensorflow:serving:request_count"})
        result = []
        for _ in range(150):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}",
                                            timeout=2) as response:
                    result = json.load(response)["data"]["result"]
            except OSError:
                pass
            if result:
                break
            time.sleep(0.1)
        assert result, "no scrape within 15 s"
        labels = [r["metric"] for r in result]
        assert {lbl["pod"] for lbl in labels} == {"tf-serving-x-7d9f-abcde"}  # "other" dropped
        assert {(lbl["status"], lbl["rollouts_pod_template_hash"], lbl["model_version"],
                 lbl["namespace"], lbl["job"]) for lbl in labels} == {
            ("OK", "7d9f", "1717258117", "serving", "tf-serving"),
            ("INTERNAL", "7d9f", "1717258117", "serving", "tf-serving")}
        assert not any(k.startswith("__meta") for lbl in labels for k in lbl)
        # The dashboard's "Serving now" panel counts this pod under its version.
        panel = next(p for p in json.loads(DASHBOARD.read_text())["panels"]
                     if p["title"].startswith("Serving now"))
        query = urllib.parse.urlencode({"query": panel["targets"][0]["expr"]})
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}",
                                    timeout=2) as response:
            serving = json.load(response)["data"]["result"]
        assert [(r["metric"], r["value"][1]) for r in serving] == [
            ({"model_version": "1717258117"}, "1")]
    finally:
        server.terminate()
        server.wait(timeout=30)
        exporter.shutdown()
        exporter.server_close()
