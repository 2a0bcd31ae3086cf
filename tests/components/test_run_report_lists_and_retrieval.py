"""A recommender's run in its report: a list feature's values per example beside its top values
(TFDV's common_stats), and the Trainer's hit rate of `retrieve` in the console summary, the HTML
and Markdown report and the KFP UI's metrics; a run without them shows neither."""
from __future__ import annotations

import json

import pytest

from tests.serving.list_rows import recs_config

HISTORY, WAITS = "hist", "waits"  # a categorical and a numeric list (tests/serving/list_rows.py)
MEASURED = {"k": 10, "clicked_examples": 5114, "items": 400, "hit_rate": 0.1114587407117716,
            "popular_hit_rate": 0.03402424716464607}
SAID = ("hit rate at 10 0.111 over 5114 clicked eval examples (the 10 most popular items: "
        "0.034)")


def _artifacts(folder, retrieval=True):
    """A StatisticsGen output over recommender-like rows (histories of 0 to 3 items), as TFDV
    writes it, and a Trainer's model_run, with or without its retrieval record."""
    import pandas as pd
    import tensorflow_data_validation as tfdv
    from tfx.types import standard_artifacts

    from components.run_report.artifacts import RETRIEVAL_FILE
    from core import nodes

    rows = pd.DataFrame({
        HISTORY: [["sku1", "sku2"], [], ["sku1", "sku2", "sku3"], ["sku1"]] * 3,
        WAITS: [[0.5], [1.0, 2.0], [], [4.0, 1.0, 2.0, 3.0]] * 3,
        "item": ["sku1", "sku2", "sku1", "sku3"] * 3,
        "dev": ["mobile", "desktop", "mobile", "mobile"] * 3,
        "hr": [7.0, 20.0, 13.0, 9.0] * 3,
        "clk": ["1", "0", "0", "1"] * 3})
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(folder / "statistics")
    statistics.split_names = json.dumps(["train", "eval"])
    for split in ("train", "eval"):
        path = folder / "statistics" / f"Split-{split}" / "FeatureStats.pb"
        path.parent.mkdir(parents=True)
        path.write_bytes(tfdv.generate_statistics_from_dataframe(rows).SerializeToString())
    model_run = standard_artifacts.ModelRun()
    model_run.uri = str(folder / "model_run")
    (folder / "model_run").mkdir()
    (folder / "model_run" / "history.json").write_text(json.dumps({"loss": [0.6, 0.5]}))
    if retrieval:
        (folder / "model_run" / RETRIEVAL_FILE).write_text(json.dumps(MEASURED))
    return {nodes.STATISTICS: statistics.mlmd_artifact, nodes.MODEL_RUN: model_run.mlmd_artifact}


def _outputs(facts) -> dict:
    from components.run_report import console, render
    from components.run_report.component import headline_metrics

    return {"console": console.summary(facts), "html": render.html(facts),
            "markdown": render.markdown(facts), "metrics": headline_metrics(facts)}


@pytest.fixture(scope="module")
def recommender_run(tmp_path_factory):
    from components.run_report import reader
    from core.config import load_config

    folder = tmp_path_factory.mktemp("recommender")
    facts = reader.from_outputs(_artifacts(folder), load_config(recs_config(folder)), "r1")
    return facts, _outputs(facts)


def test_a_list_features_values_per_example_are_read_from_tfdvs_common_stats(recommender_run):
    facts, _ = recommender_run
    history = facts.features[HISTORY]["eval"]
    assert history.kind == "categorical" and history.values is not None
    # 12 rows, lengths 2, 0, 3, 1: an empty list is present, with 0 values.
    assert (history.values.min, history.values.max) == (0, 3)
    assert history.values.mean == pytest.approx(1.5)
    assert history.missing == 0 and len(history.values.quantiles) == 11
    assert history.values.quantiles[0] == 0 and history.values.quantiles[-1] == 3
    assert history.buckets[0] == ("sku1", 9.0)  # its top values count values, not rows
    waits = facts.features[WAITS]["eval"]
    assert waits.kind == "numeric" and waits.mean == pytest.approx(13.5 / 7)
    assert (waits.values.min, waits.values.mean, waits.values.max) == (0, 1.75, 4)
    # Single-valued features hold no values per example.
    assert all(facts.features[name]["eval"].values is None
               for name in ("item", "dev", "hr", "clk"))


def test_the_data_section_shows_a_list_features_values_per_example(recommender_run):
    from components.run_report import words

    facts, outputs = recommender_run
    html = outputs["html"]
    data = html[html.index('<section id="data">'):html.index('<section id="drift">')]
    said = words.values_per_example(facts.features[HISTORY]["eval"].values)
    assert said.startswith("0 / 1.50 / 3 (median ")
    assert "<th>values per example (min / mean / max)</th>" in data
    assert f"<td>{HISTORY}</td><td>eval</td><td>categorical list</td>" in data
    assert f"<td>{said}</td>" in data and "sku1 (9)" in data
    assert f"<td>{WAITS}</td><td>train</td><td>numeric list</td>" in data
    assert "<td>item</td><td>eval</td><td>categorical</td>" in data  # an id: one value
    assert data.count("<td>-</td></tr>") == 2 * 4  # the single-valued features' cells


def test_retrieval_quality_is_in_every_output_of_the_report(recommender_run):
    facts, outputs = recommender_run
    assert facts.retrieval.k == 10 and facts.retrieval.items == 400
    assert f"  retrieval:  {SAID}\n" in outputs["console"]
    assert f"Retrieval: {SAID}" in outputs["markdown"]
    html = outputs["html"]
    evaluation = html[html.index('<section id="evaluation">'):
                      html.index('<section id="training">')]
    assert "<h3>Retrieval on the eval split</h3>" in evaluation and SAID in evaluation
    assert "<td>0.1115</td>" in evaluation and "<td>400</td>" in evaluation
    assert outputs["metrics"]["retrieval_hit_rate_at_10"] == pytest.approx(MEASURED["hit_rate"])
    assert outputs["metrics"]["retrieval_popular_hit_rate_at_10"] == \
        pytest.approx(MEASURED["popular_hit_rate"])


def test_a_run_without_lists_or_retrieval_shows_neither(tmp_path):
    """The bundled example's config (no features.lists) and a model_run without retrieval.json,
    as every model without `retrieval:` leaves it."""
    from components.run_report import reader
    from tests.helpers import example_config

    facts = reader.from_outputs(_artifacts(tmp_path, retrieval=False), example_config(), "r2")
    assert facts.retrieval is None and facts.training == {"loss": [0.6, 0.5]}
    assert all(entry.values is None for per_split in facts.features.values()
               for entry in per_split.values())
    outputs = _outputs(facts)
    assert "retrieval" not in outputs["console"] and "Retrieval" not in outputs["markdown"]
    assert "Retrieval" not in outputs["html"] and "values per example" not in outputs["html"]
    assert not [name for name in outputs["metrics"] if "retrieval" in name]


def test_no_clicked_eval_example_is_said_and_gives_no_metric():
    from components.run_report import console
    from components.run_report.component import headline_metrics
    from components.run_report.facts import Retrieval, RunFacts

    facts = RunFacts(pipeline="p", run_id="r", key_metric="auc",
                     retrieval=Retrieval(10, 0, 400, 0.0, 0.0))
    assert ("retrieval:  hit rate at 10: not measured (no clicked example in the eval split)"
            in console.summary(facts))
    assert not [name for name in headline_metrics(facts) if "retrieval" in name]


def test_the_report_reads_the_file_the_trainer_writes(tmp_path):
    """One file name: components/trainer/retrieval_quality.py writes it (and loads TensorFlow, so
    the report names it again); the report reads back what the Trainer wrote."""
    from components.run_report import artifacts
    from components.trainer import retrieval_quality

    assert artifacts.RETRIEVAL_FILE == retrieval_quality.RETRIEVAL_FILE
    retrieval_quality.write(MEASURED, str(tmp_path))
    read = artifacts.retrieval_quality(str(tmp_path))
    assert (read.k, read.clicked_examples, read.items, read.hit_rate, read.popular_hit_rate) == \
        tuple(MEASURED.values())
