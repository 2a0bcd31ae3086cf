"""The skew check in the run report (issue 45.3): read from its artifact like drift, a "Serving
skew" section after drift (the worst features first, distance against threshold, missing
features, values training never had, the note when nothing was compared), the console and
Markdown line, the KFP UI's scalars, and the figures as a Prometheus text file."""
from __future__ import annotations

import copy
import json
import math
import os
from types import SimpleNamespace

import pytest

from core import nodes

PIPELINE = "recommender"
# skew.json as components/skew_gate writes it, its features NOT worst first: the report orders
# them itself.
RESULT = {
    "serving_span": "20261203", "training_spans": ["20261201", "20261202"],
    "rows": {"training": 5000, "serving": 812},
    "features": [
        {"feature": "device", "measure": "L-infinity distance", "distance": 0.12,
         "threshold": 0.25, "skewed": False},
        {"feature": "hour", "measure": "Jensen-Shannon divergence", "distance": 0.8,
         "threshold": 0.25, "skewed": True},
        {"feature": "item", "measure": "L-infinity distance", "distance": None,
         "threshold": 0.25, "skewed": False},  # TFDV gave no distance
        {"feature": "user_click_history", "measure": "mean list length", "distance": 0.9,
         "threshold": 0.5, "skewed": True}],
    "missing": [{"feature": "page", "training_presence": 1.0, "serving_presence": 0.1}],
    "unseen": [{"feature": "device", "values": ["smart-tv", "watch"], "count": 37}],
    "note": "", "skewed": True}
WORST_FIRST = ["hour", "user_click_history", "device", "item"]  # ratios 3.2, 1.8, 0.48, -
NOTHING = {**RESULT, "serving_span": None, "rows": {"training": 0, "serving": 0},
           "features": [], "missing": [], "unseen": [], "skewed": False,
           "note": "No serving span under requests/ with at least 100 rows yet: nothing to "
                   "compare."}


def skew_artifact(folder, result=RESULT):
    from tfx.types import standard_artifacts

    from components.skew_gate.executor import RESULT_FILE

    artifact = standard_artifacts.ExampleAnomalies()
    artifact.uri = str(folder / "skew")
    os.makedirs(artifact.uri, exist_ok=True)
    (folder / "skew" / RESULT_FILE).write_text(json.dumps(result))
    return artifact


def config(on_skew: str = "stop"):
    from tests.helpers import example_config

    found = example_config()
    return found.model_copy(update={"pipeline_name": PIPELINE, "skew": found.skew.model_copy(
        update={"on_skew": on_skew})})


def facts_of(result=RESULT, action="stop", checked_at=None):
    from components.run_report.facts import RunFacts

    return RunFacts(pipeline=PIPELINE, run_id="r1", key_metric="auc",
                    skew={**copy.deepcopy(result), "action": action, "checked_at": checked_at})


def section(html: str) -> str:
    return html[html.index('<section id="skew">'):html.index('<section id="evaluation">')]


def test_the_report_reads_the_skew_checks_result_and_the_configs_action(tmp_path):
    from components.run_report import reader

    settings = config("stop")
    artifact = skew_artifact(tmp_path)
    facts = reader.from_outputs({nodes.SKEW: artifact.mlmd_artifact}, settings, "r1")
    # A step's input artifact carries no creation time: the check's time is not known.
    assert facts.skew == {**RESULT, "action": "stop", "checked_at": None}
    assert reader.from_outputs({nodes.SKEW: artifact.mlmd_artifact}, config("warn"),
                               "r1").skew["action"] == "warn"
    assert reader.from_outputs({}, settings, "r1").skew is None


def test_a_recorded_checks_time_is_its_artifacts_creation(tmp_path):
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2 as pb

    from components.run_report import reader

    store = metadata_store.MetadataStore(pb.ConnectionConfig(fake_database={}))
    artifact = skew_artifact(tmp_path).mlmd_artifact
    artifact.type_id = store.put_artifact_type(pb.ArtifactType(name="ExampleAnomalies"))
    [artifact_id] = store.put_artifacts([artifact])
    [recorded] = store.get_artifacts_by_id([artifact_id])
    assert recorded.create_time_since_epoch > 0
    facts = reader.from_outputs({nodes.SKEW: recorded}, config(), "r1")
    assert facts.skew["checked_at"] == recorded.create_time_since_epoch / 1000


def test_the_serving_skew_section_lists_the_worst_features_first():
    from components.run_report import render

    html = render.html(facts_of())
    assert html.index('<section id="drift">') < html.index('<section id="skew">')
    body = section(html)
    assert "<h2>Serving skew</h2>" in body
    rows = [body.index(f"<tr><td>{name}</td>") for name in WORST_FIRST]
    assert rows == sorted(rows)
    assert ("<tr><td>hour</td><td>Jensen-Shannon divergence</td><td>0.8000</td><td>0.2500</td>"
            '<td>3.20</td><td><span class="fail">FAIL</span></td></tr>') in body
    assert ("<tr><td>device</td><td>L-infinity distance</td><td>0.1200</td><td>0.2500</td>"
            '<td>0.48</td><td><span class="pass">pass</span></td></tr>') in body
    assert ("<tr><td>item</td><td>L-infinity distance</td><td>-</td><td>0.2500</td><td>-</td>"
            '<td><span class="muted">not measured</span></td></tr>') in body
    assert "serving span 20261203 (812 rows) against training spans 20261201, 20261202 " \
           "(5000 rows)" in body
    # Stopped: the verdict is red; warned: amber.
    assert '<p class="bad">' in body and "(on skew: stop)" in body
    assert '<p class="warn">' in section(render.html(facts_of(action="warn")))


def test_missing_features_and_unseen_values_are_listed():
    from components.run_report import render

    body = section(render.html(facts_of()))
    assert "<h3>Missing at serving</h3>" in body
    assert "<tr><td>page</td><td>100.0%</td><td>10.0%</td></tr>" in body
    assert "<h3>Values training never had</h3>" in body
    assert "<tr><td>device</td><td>37</td><td>smart-tv, watch</td></tr>" in body
    clean = {**RESULT, "missing": [], "unseen": [], "skewed": False,
             "features": [dict(f, skewed=False, distance=0.01) for f in RESULT["features"]]}
    body = section(render.html(facts_of(clean)))
    assert "Missing at serving" not in body and "never had" not in body
    assert '<p class="ok">' in body and "no feature beyond its threshold" in body


def test_the_note_says_why_nothing_was_compared():
    from components.run_report import render
    from components.run_report.facts import RunFacts

    body = section(render.html(facts_of(NOTHING)))
    assert NOTHING["note"] in body and "<table>" not in body
    body = section(render.html(RunFacts(pipeline=PIPELINE, run_id="r1", key_metric="auc")))
    assert "Not measured: no skew check result" in body


def test_the_console_and_markdown_say_the_skew_in_a_line():
    from components.run_report import console, render

    line = ("serving span 20261203 (812 rows) against training spans 20261201, 20261202 (5000 "
            "rows): 2 feature(s) beyond the threshold: hour (Jensen-Shannon divergence 0.800 > "
            "0.25), user_click_history (mean list length 0.900 > 0.5); missing at serving: "
            "page; values training never had: device (37 rows) (on skew: stop)")
    assert f"  skew:       {line}\n" in console.summary(facts_of()) + "\n"
    assert render.markdown(facts_of()).count("Serving skew: serving span 20261203") == 1
    assert "skew:       not compared: No serving span" in console.summary(facts_of(NOTHING))
    from components.run_report.facts import RunFacts

    assert "skew" not in console.summary(RunFacts(pipeline=PIPELINE, run_id="r1",
                                                  key_metric="auc"))


def test_the_kfp_ui_scalars_of_a_compared_skew_and_none_without():
    from components.run_report.executor import headline_metrics
    from components.run_report.facts import RunFacts

    metrics = headline_metrics(facts_of())
    assert metrics["skewed_features"] == 2.0
    assert metrics["worst_skew_ratio"] == pytest.approx(3.2)
    assert metrics["missing_serving_features"] == 1.0
    assert metrics["unseen_serving_values"] == 37.0
    # Nothing compared, or no check: no skew scalars (a 0 would say "checked, no skew").
    for facts in (facts_of(NOTHING), RunFacts(pipeline=PIPELINE, run_id="r1", key_metric="auc")):
        assert not [name for name in headline_metrics(facts) if "skew" in name
                    or "serving" in name]


def parsed(text: str) -> dict:
    """(name, sorted labels) -> value, by prometheus_client's own text parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_the_textfile_holds_the_skew_figures():
    from components.run_report import skew_textfile

    found = parsed(skew_textfile.text(facts_of(checked_at=1796270400.5)))
    base = (("pipeline", PIPELINE),)
    ratio = {labels: value for (name, labels), value in found.items()
             if name == "tfx_serving_skew_ratio"}
    assert ratio == {
        (("feature", "device"), ("measure", "L-infinity distance"), *base): pytest.approx(0.48),
        (("feature", "hour"), ("measure", "Jensen-Shannon divergence"), *base):
            pytest.approx(3.2),
        (("feature", "user_click_history"), ("measure", "mean list length"), *base):
            pytest.approx(1.8)}  # item: no distance, no series
    assert found[("tfx_serving_skew_features_skewed", base)] == 2
    assert found[("tfx_serving_skew_missing_features", base)] == 1
    assert found[("tfx_serving_skew_unseen_values", (("feature", "device"), *base))] == 37
    assert found[("tfx_serving_skew_last_check_timestamp_seconds", base)] == 1796270400.5
    # A check of unknown time (a Kubeflow step's input) is dated when the report is written.
    unknown = parsed(skew_textfile.text(facts_of(), now=1796300000.0))
    assert unknown[("tfx_serving_skew_last_check_timestamp_seconds", base)] == 1796300000.0
    assert {name for name, _ in found} == set(skew_textfile.NAMES)


def test_the_textfile_is_replaced_whole_and_only_when_something_was_compared(tmp_path):
    from components.run_report import skew_textfile

    path = skew_textfile.write(facts_of(checked_at=100.0), str(tmp_path))
    assert path == str(tmp_path / skew_textfile.TEXTFILE)
    first = os.stat(path).st_ino
    skew_textfile.write(facts_of(checked_at=200.0), str(tmp_path))
    # A new file renamed over the old one (a scrape reads one or the other, never half), and no
    # temporary file left for the collector to find.
    assert os.stat(path).st_ino != first and os.listdir(tmp_path) == [skew_textfile.TEXTFILE]
    assert parsed(open(path).read())[
        ("tfx_serving_skew_last_check_timestamp_seconds", (("pipeline", PIPELINE),))] == 200.0
    # Nothing compared: the last figures stay, with their time (ServingSkewCheckStale's clock).
    assert skew_textfile.write(facts_of(NOTHING), str(tmp_path)) is None
    assert os.stat(path).st_ino != first and "200.0" in open(path).read()


def test_the_textfile_goes_to_the_configured_collector_directory_too(tmp_path):
    from components.run_report import skew_textfile

    collector = tmp_path / "node-exporter"
    settings = SimpleNamespace(skew=SimpleNamespace(prometheus_textfile_dir=str(collector)))
    written = skew_textfile.export(facts_of(), str(tmp_path / "report"), settings)
    assert written == [str(tmp_path / "report" / skew_textfile.TEXTFILE),
                       str(collector / f"serving_skew_{PIPELINE}.prom")]
    assert open(written[0]).read() == open(written[1]).read()
    unset = SimpleNamespace(skew=SimpleNamespace(prometheus_textfile_dir=None))
    assert skew_textfile.export(facts_of(), str(tmp_path / "other"), unset) == [
        str(tmp_path / "other" / skew_textfile.TEXTFILE)]


def test_the_kubeflow_step_passes_its_skew_input_to_the_report(tmp_path, monkeypatch):
    """The RunReport step: its `skew` input read as the SkewCheck's output, the scalars set and
    the text file written beside the HTML output."""
    from tfx.types import standard_artifacts

    from components.run_report import executor, reader, skew_textfile
    from components.run_report.component import RunReport

    spec = RunReport.SPEC_CLASS.INPUTS["skew"]
    assert spec.type is standard_artifacts.ExampleAnomalies and spec.optional
    skew = skew_artifact(tmp_path)
    real = reader.from_outputs
    seen = {}

    def only_skew(outputs, settings, run_id, **kwargs):
        seen.update(outputs)
        return real({nodes.SKEW: outputs[nodes.SKEW]}, settings, run_id)

    monkeypatch.setattr(reader, "from_outputs", only_skew)
    outputs = {}
    for key, kind in (("html", executor.HtmlReport), ("markdown", executor.MarkdownReport),
                      ("metrics", executor.MetricsReport)):
        outputs[key] = kind()
        outputs[key].uri = str(tmp_path / "pipeline-root" / PIPELINE / "run-7" / "RunReport"
                               / "5d9e3c1a" / key)
    inputs = [standard_artifacts.Examples() for _ in range(9)]
    executor.run_report(*inputs, outputs["html"], outputs["markdown"], outputs["metrics"],
                        config().model_dump_json(), "data", skew=skew)
    assert seen[nodes.SKEW] is skew.mlmd_artifact
    assert outputs["metrics"].get_float_custom_property("skewed_features") == 2.0
    assert outputs["metrics"].get_float_custom_property("worst_skew_ratio") == \
        pytest.approx(3.2)
    beside = tmp_path / "pipeline-root" / PIPELINE / "run-7" / "RunReport" / "5d9e3c1a" / \
        skew_textfile.TEXTFILE
    assert parsed(beside.read_text())[("tfx_serving_skew_features_skewed",
                                       (("pipeline", PIPELINE),))] == 2
    assert "<h2>Serving skew</h2>" in open(outputs["html"].uri).read()


def test_a_feature_without_a_distance_has_no_ratio():
    from components.run_report.facts import skew_ratio

    assert skew_ratio({"distance": None, "threshold": 0.25}) is None
    assert skew_ratio({"distance": 0.5, "threshold": 0.25}) == 2.0
    assert skew_ratio({"distance": 0.1, "threshold": 0.0}) == math.inf


def test_the_pipelines_run_report_step_gets_the_skew_checks_result(tmp_path):
    """pipeline/builder.py: the Kubeflow RunReport step's skew input is SkewCheck's output."""
    from core.config import load_config
    from pipeline.builder import build_components
    from tests.helpers import write_config

    steps = {step.id: step for step in build_components(
        load_config(write_config(tmp_path)), run_report=True)}
    node, key = nodes.SKEW
    assert steps[nodes.RUN_REPORT].inputs["skew"] is steps[node].outputs[key]


def test_a_browser_shows_the_serving_skew_section_whole(tmp_path):
    """The section with every table, opened in headless chromium as a person would."""
    from components.run_report import render
    from tests.pipeline.test_report_browser import check, problems

    page = check(render.html(facts_of()), tmp_path)
    assert problems(page) == [] and "skew" in page.sections
    assert "Serving skew" in page.text and "Values training never had" in page.text
    assert "hour (Jensen-Shannon divergence 0.800 > 0.25)" in page.text
