"""The nightly pipeline's alerts (deploy/serving/prometheus/pipeline-alerts.yml, issue 45.3): valid,
loaded by both Prometheus configs, documented, each shown firing and quiet by promtool; and
reading what the run report writes: the rules' metric names and the unit tests' series are those
of the report's textfile (components/run_report/skew_textfile.py), and that file itself, fed to
promtool, fires ServingSkewHigh for exactly the features the skew check called skewed.

Each check also runs on a broken copy that it must reject. Tool: promtool
(test_serving_artifacts.tool).
"""
from __future__ import annotations

import re

import pytest

from tests.components.test_run_report_skew import PIPELINE, facts_of
from tests.deploy.test_serving_artifacts import (PROMETHEUS, SERVING, not_firing_and_quiet,
                                                output, promtool_expecting_quiet, run, tool)
from tests.helpers import dump_yaml, load_yaml

RULES = PROMETHEUS / "pipeline-alerts.yml"
RULES_TEST = PROMETHEUS / "pipeline-alerts_test.yml"
README = SERVING / "README.md"
EXPECTED_ALERTS = {"ServingSkewHigh", "ServingFeatureMissing", "ServingSkewCheckStale"}
# What node_exporter's scrape job adds to the textfile's series.
SCRAPE_LABELS = {"job", "instance"}


def written(text: str = "") -> dict:
    """name -> label names, of the textfile the report writes (prometheus_client's parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    from components.run_report import skew_textfile

    text = text or skew_textfile.text(facts_of(checked_at=0.0))
    return {sample.name: set(sample.labels) for family in text_string_to_metric_families(text)
            for sample in family.samples}


def defined_alerts(text: str) -> set:
    return {r["alert"] for g in load_yaml(text)["groups"] for r in g["rules"] if "alert" in r}


def documented_alerts(readme: str) -> set:
    """The first column of the README's table of the nightly pipeline's alerts."""
    part = readme.split("#### The nightly pipeline's alerts", 1)[1]
    table = part.split("| alert ", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `(\w+)` +\|", table, re.M))


def name_problems(rules_text: str, names: dict) -> list:
    """Metric names the rules read that the report does not write, and rules that read none."""
    problems = []
    for group in load_yaml(rules_text)["groups"]:
        for rule in group["rules"]:
            read = set(re.findall(r"\btfx_\w+", rule["expr"]))
            problems += [f"{rule['alert']}: {name}" for name in sorted(read - set(names))]
            if not read:
                problems.append(f"{rule['alert']}: reads none of the report's metrics")
    return problems


def series_problems(tests: dict, names: dict) -> list:
    """Input series of the unit tests that the textfile, scraped, would not hold: another name,
    or other label names than its own and the scrape's."""
    from prometheus_client.parser import text_string_to_metric_families

    problems = []
    for case in tests["tests"]:
        for series in case["input_series"]:
            [family] = text_string_to_metric_families(f"{series['series']} 0\n")
            [sample] = family.samples
            if sample.name not in names:
                problems.append(f"{case['name']}: {sample.name}")
            elif set(sample.labels) != names[sample.name] | SCRAPE_LABELS:
                problems.append(f"{case['name']}: {series['series']}")
    return problems


def test_the_rules_are_valid_documented_and_loaded_by_both_configs():
    proc = run([tool("promtool"), "check", "rules", str(RULES)])
    assert proc.returncode == 0, output(proc)
    assert defined_alerts(RULES.read_text()) == EXPECTED_ALERTS
    assert documented_alerts(README.read_text()) == EXPECTED_ALERTS
    for name in ("prometheus.yml", "prometheus-kubernetes.yml"):
        assert RULES.name in load_yaml((PROMETHEUS / name).read_text())["rule_files"], name


def test_the_documented_alerts_check_catches_a_deleted_alert():
    readme = README.read_text().replace("| `ServingFeatureMissing` |", "| ServingFeatureMissing |")
    assert documented_alerts(readme) == EXPECTED_ALERTS - {"ServingFeatureMissing"}


def test_unit_tests_pass_and_cover_every_alert_firing_and_quiet():
    proc = run([tool("promtool"), "test", "rules", RULES_TEST.name], cwd=PROMETHEUS)
    assert proc.returncode == 0, output(proc)
    assert not_firing_and_quiet(RULES_TEST, EXPECTED_ALERTS) == []


@pytest.mark.parametrize("alert", sorted(EXPECTED_ALERTS))
def test_unit_tests_catch_a_wrong_expectation(tmp_path, alert):
    """Each firing case, expected quiet instead, fails promtool: the cases reach the rule."""
    proc = promtool_expecting_quiet(RULES, RULES_TEST, alert, tmp_path)
    assert proc.returncode != 0, output(proc)
    assert alert in output(proc)


def test_the_rules_and_their_tests_read_the_names_the_report_writes():
    from components.run_report import skew_textfile

    names = written()
    assert set(names) == set(skew_textfile.NAMES)
    assert name_problems(RULES.read_text(), names) == []
    assert series_problems(load_yaml(RULES_TEST.read_text()), names) == []


def test_the_name_checks_catch_a_renamed_metric():
    names = written()
    renamed = {("tfx_serving_skew_distance_ratio" if name == "tfx_serving_skew_ratio" else name):
               labels for name, labels in names.items()}
    assert name_problems(RULES.read_text(), renamed) == [
        "ServingSkewHigh: tfx_serving_skew_ratio"]
    tests = load_yaml(RULES_TEST.read_text())
    assert len(series_problems(tests, renamed)) == 5  # the ratio's series
    series = tests["tests"][0]["input_series"][0]
    series["series"] = series["series"].replace('feature="hour", ', "")
    assert series_problems(tests, names) == [f"{tests['tests'][0]['name']}: {series['series']}"]


def promtool_on_the_reports_file(tmp_path, expected: dict) -> str:
    """promtool test rules with the report's own textfile as input (each sample one series,
    scraped every minute for an hour; the check made at promtool's time 0) and the rules
    without annotations: expected is alert -> the label sets it must fire with at 10 minutes."""
    from prometheus_client.parser import text_string_to_metric_families

    from components.run_report import skew_textfile

    rules = load_yaml(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
    (tmp_path / RULES.name).write_text(dump_yaml(rules))
    scrape = {"job": "node", "instance": "trainer-1:9100"}
    series = []
    for family in text_string_to_metric_families(
            skew_textfile.text(facts_of(checked_at=0.0))):
        for sample in family.samples:
            labels = ", ".join(f'{k}="{v}"' for k, v in {**sample.labels, **scrape}.items())
            series.append({"series": f"{sample.name}{{{labels}}}",
                           "values": f"{sample.value!r}x60"})
    cases = [{"eval_time": "10m", "alertname": alert,
              "exp_alerts": [{"exp_labels": {"severity": "warning", **scrape, **labels}}
                             for labels in fired]} for alert, fired in expected.items()]
    (tmp_path / "report_test.yml").write_text(dump_yaml({
        "rule_files": [RULES.name], "evaluation_interval": "1m",
        "tests": [{"name": "the run report's textfile", "interval": "1m",
                   "input_series": series, "alert_rule_test": cases}]}))
    proc = run([tool("promtool"), "test", "rules", "report_test.yml"], cwd=tmp_path)
    return output(proc) if proc.returncode else ""


# What the fixture's skew check found (tests/components/test_run_report_skew.py): hour and
# user_click_history beyond their thresholds, device within, item not measured; one feature
# missing; checked 10 minutes before.
FIRES = {
    "ServingSkewHigh": [
        {"pipeline": PIPELINE, "feature": "hour", "measure": "Jensen-Shannon divergence"},
        {"pipeline": PIPELINE, "feature": "user_click_history", "measure": "mean list length"}],
    "ServingFeatureMissing": [{"pipeline": PIPELINE}],
    "ServingSkewCheckStale": []}


def test_the_reports_own_textfile_fires_the_alerts_of_what_it_found(tmp_path):
    assert promtool_on_the_reports_file(tmp_path, FIRES) == ""


def test_the_reports_textfile_check_catches_a_wrong_expectation(tmp_path):
    """device is within its threshold (0.48 of it): expected to fire, promtool says no."""
    wrong = {**FIRES, "ServingSkewHigh": [*FIRES["ServingSkewHigh"], {
        "pipeline": PIPELINE, "feature": "device", "measure": "L-infinity distance"}]}
    assert "ServingSkewHigh" in promtool_on_the_reports_file(tmp_path, wrong)
