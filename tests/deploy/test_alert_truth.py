"""The alert rules tell the truth about TF Serving 2.16.1 (deploy/serving/prometheus):

- probes are out of the error ratio: the pods' GET /v1/models/<name> count in request_count as OK
  (tensorflow_serving/model_servers/http_server.cc:201), so ModelHighErrorRate divides by the
  inference requests (request_latency_count of predict/classify/regress plus the errors);
- a version that loads but fails its warmup replay is not "available": load_attempt_count says
  success (TensorFlow's loader runs before warmup), model_warmup_latency{status} says otherwise
  (servables/tensorflow/saved_model_warmup_util.cc:40-47, 216-224), and ModelUnavailable and
  ModelLoadFailed read it;
- gRPC calls count as REST calls do, in the same series with their own API and entrypoint
  labels (Predict/Classify/Regress, GRPC: model_servers/prediction_service_impl.cc at 2.16.1
  and 2.20.0), and the request alerts read both (tests/deploy/test_canary_grpc.py also feeds
  them the stand-in's real gRPC traffic);
- the unit tests' input series are shaped as the exporter writes them (names, label names).

Each fix has a negative control: the rule as it was, run on the same promtool cases, misses.
"""

from __future__ import annotations

import shutil

from tests.helpers import dump_yaml, load_yaml
from tests.deploy import tf_serving_metrics as tfs
from tests.deploy.test_rollout_analysis import SCRAPE_LABELS
from tests.deploy.test_serving_artifacts import PROMETHEUS, output, run, tool

CASES = {
    "probes": "few requests, many probes",
    "warmup": "the only version loads but fails its warmup",
    "warmup-retry": "a warmup that fails once and passes on the retry",
    "grpc-slow": "slow gRPC classifications and regressions",
    "grpc-mostly": "mostly gRPC requests, 1 % failing",
}


def promtool_cases(tmp_path, names: list[str], edit=None):
    """promtool test rules on the named cases of alerts_test.yml, with alerts.yml edited."""
    shutil.copytree(PROMETHEUS, tmp_path, dirs_exist_ok=True)
    alerts = tmp_path / "alerts.yml"
    if edit:
        text = alerts.read_text()
        edited = edit(text)
        assert edited != text, "the edit changed nothing"
        alerts.write_text(edited)
    tests = load_yaml((tmp_path / "alerts_test.yml").read_text())
    tests["tests"] = [t for t in tests["tests"] if t["name"] in names]
    assert len(tests["tests"]) == len(names)
    (tmp_path / "alerts_test.yml").write_text(dump_yaml(tests))
    return run([tool("promtool"), "test", "rules", "alerts_test.yml"], cwd=tmp_path)


def test_the_cases_pass(tmp_path):
    proc = promtool_cases(tmp_path, list(CASES.values()))
    assert proc.returncode == 0, output(proc)


def probes_in_the_denominator(alerts: str) -> str:
    """ModelHighErrorRate as it was: errors over all of request_count."""
    rules = load_yaml(alerts)
    for rule in rules["groups"][0]["rules"]:
        if rule.get("alert") == "ModelHighErrorRate":
            errors = rule["expr"].split("\n/\n", 1)[0]
            everything = errors.replace(', status!="OK"', "")
            rule["expr"] = f"{errors}\n/\n{everything}\n> 0.05\n"
    return dump_yaml(rules, sort_keys=False)


def test_with_probes_counted_the_error_alert_misses_a_low_traffic_failure(tmp_path):
    proc = promtool_cases(tmp_path, [CASES["probes"]], probes_in_the_denominator)
    assert proc.returncode != 0, output(proc)
    assert "ModelHighErrorRate" in output(proc)


def warmup_ignored(alerts: str) -> str:
    """ModelUnavailable and ModelLoadFailed without the warmup metric, as they were."""
    rules = load_yaml(alerts)
    for rule in rules["groups"][0]["rules"]:
        if rule.get("alert") == "ModelUnavailable":
            load = rule["expr"].split("count(", 1)[1].split("unless", 1)[0]
            rule["expr"] = f"(count({load}) or vector(0)) == 0\n"
        if rule.get("alert") == "ModelLoadFailed":
            rule["expr"] = rule["expr"].split("\nor\n", 1)[0] + "\n"
    return dump_yaml(rules, sort_keys=False)


def test_without_the_warmup_metric_a_version_that_never_serves_looks_available(tmp_path):
    proc = promtool_cases(tmp_path, [CASES["warmup"]], warmup_ignored)
    assert proc.returncode != 0, output(proc)
    assert "ModelUnavailable" in output(proc) and "ModelLoadFailed" in output(proc)


def test_a_failed_warmup_retried_successfully_stays_quiet_only_with_the_ok_clause(tmp_path):
    """Negative control of the `unless ... status="OK"` clause: without it, a warmup that failed
    once and then passed would keep alerting."""
    def without_ok(alerts: str) -> str:
        rules = load_yaml(alerts)
        for rule in rules["groups"][0]["rules"]:
            if rule.get("alert") == "ModelLoadFailed":
                failed, warmup = rule["expr"].split("\nor\n", 1)
                warmup = warmup.split("unless", 1)[0].strip().lstrip("(").strip()
                rule["expr"] = f"{failed}\nor\n{warmup}\n"
        return dump_yaml(rules, sort_keys=False)

    proc = promtool_cases(tmp_path, [CASES["warmup-retry"]], without_ok)
    assert proc.returncode != 0, output(proc)
    assert "ModelLoadFailed" in output(proc)


def test_on_rest_labels_alone_the_request_alerts_misjudge_grpc_traffic(tmp_path):
    """Negative control: with the inference APIs as REST alone names them (case-sensitive), a
    slow gRPC-only server raises no latency alert, and a mostly-gRPC server with 1 % failing
    has its ratio taken over the REST requests only (11 %) and alerts."""
    def rest_labels(alerts: str) -> str:
        return alerts.replace('API=~"(?i)predict|classify|regress"',
                              'API=~"predict|classify|regress"')

    proc = promtool_cases(tmp_path, [CASES["grpc-slow"], CASES["grpc-mostly"]], rest_labels)
    assert proc.returncode != 0, output(proc)
    assert "ModelHighP99Latency" in output(proc) and "ModelHighErrorRate" in output(proc)


def series_problems(tests: dict) -> list[str]:
    """Input series of promtool cases that the exporter would not write: unknown names, label
    names it does not have, an API value TF Serving does not use."""
    problems = []
    for case in tests["tests"]:
        for series in case["input_series"]:
            for name, labels in tfs.selected_series(series["series"]):
                if name in tfs.PROMETHEUS_SERIES:
                    continue
                metric = tfs.BY_SERIES.get(name)
                if metric is None:
                    problems.append(f"{case['name']}: {name}")
                elif labels - metric.series_labels(name) - SCRAPE_LABELS:
                    problems.append(f"{case['name']}: {series['series']}")
                elif 'API="' in series["series"]:
                    api = series["series"].split('API="', 1)[1].split('"', 1)[0]
                    if api not in ("", *tfs.REST_APIS, *tfs.GRPC_APIS):
                        problems.append(f"{case['name']}: API={api!r} is no API TF Serving names")
    return problems


def test_the_unit_tests_feed_only_series_the_exporter_writes():
    assert series_problems(load_yaml((PROMETHEUS / "alerts_test.yml").read_text())) == []


def test_the_series_check_catches_made_up_series():
    tests = load_yaml((PROMETHEUS / "alerts_test.yml").read_text())
    series = tests["tests"][0]["input_series"]
    probe = next(s for s in series if 'API=""' in s["series"])
    probe["series"] = probe["series"].replace('API=""', 'API="GetModelStatus"')
    series.append({"series": ':tensorflow:serving:request_count{model_name="m", version="1"}',
                   "values": "1"})
    series.append({"series": ':tensorflow:serving:model_load_count{model_name="m"}',
                   "values": "1"})
    problems = series_problems(tests)
    assert len(problems) == 3, problems
    assert "API='GetModelStatus'" in problems[0]
