"""A night whose candidate the Evaluator refuses says "not blessed" in every output of the run
report: the console summary, the HTML and Markdown report, and the KFP UI's metrics.

The same artifacts, read two ways: in the RunReport step on Kubeflow (every custom property a
struct_value, as KFP's launcher and TFX's step parser hand it on: tests/components/kfp_artifacts.py)
and from a local run's metadata store (plain int and string values, as TFX's local runner
records them). The old reading (`bool()` of the property, a Struct, truthy even when it holds 0.0)
reports the Kubeflow night as blessed: the negative control.
"""
from __future__ import annotations

import json
import uuid

import pytest

from tests.components import kfp_artifacts
from tests.helpers import example_config, example_data, newest_span, span_files

RUN_ID = "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"  # KFP's run ids are UUIDs
SERVING_VERSION = "1796014900"
SPLITS = ("train", "eval")


def _write(path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _tfrecord(path, *messages) -> None:
    import tensorflow as tf

    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for message in messages:
            writer.write(message.SerializeToString())


def _refused_evaluation(folder):
    """An Evaluator's output as TFMA writes it (metrics and validations, one TFRecord shard each),
    the candidate worse than every bound the config sets: TFMA's own validator decides."""
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.evaluators import metrics_validator
    from tensorflow_model_analysis.proto import metrics_for_slice_pb2
    from tensorflow_model_analysis.utils import config_util

    from components.evaluator.eval_config import build_eval_config
    from components.run_report.reader import snake_case
    from core.config import BASELINE, CANDIDATE

    config = example_config()
    class_name, bounds = next(iter(config.evaluation.thresholds.items()))
    metric = snake_case(class_name)
    candidate = (bounds.lower_bound - 0.1 if bounds.lower_bound is not None else
                 bounds.upper_bound + 0.1 if bounds.upper_bound is not None else 0.5)
    baseline = (candidate + bounds.max_decrease + 0.05 if bounds.max_decrease is not None else
                candidate - bounds.max_increase - 0.05 if bounds.max_increase is not None else
                candidate)
    def key(model, is_diff=False):
        return tfma.metrics.MetricKey(metric, model_name=model, example_weighted=False,
                                      is_diff=is_diff)

    values = {key(CANDIDATE): candidate, key(BASELINE): baseline,
              key(CANDIDATE, is_diff=True): candidate - baseline}
    per_slice = metrics_for_slice_pb2.MetricsForSlice()
    for key, value in values.items():
        entry = per_slice.metric_keys_and_values.add()
        entry.key.CopyFrom(key.to_proto())
        entry.value.double_value.value = value
    # The Evaluator's config as TFMA completes it before validating (TFX passes has_baseline).
    eval_config = config_util.update_eval_config_with_defaults(build_eval_config(config),
                                                              has_baseline=True)
    validation = metrics_validator.validate_metrics(((), values), eval_config)
    assert not validation.validation_ok
    _tfrecord(folder / "metrics-00000-of-00001.tfrecord", per_slice)
    _tfrecord(folder / "validations-00000-of-00001.tfrecord", validation)
    return bounds


def refused_night(folder):
    """The artifacts the RunReport step reads after a refused night, as their components wrote
    them (files and custom properties): (node id, key) -> TFX artifact."""
    import pandas as pd
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import anomalies_pb2
    from tfx.types import standard_artifacts as kinds

    from components.anomaly_gate.component import ANOMALIES_FILE
    from components.drift_gate.component import RESULT_FILE
    from core import nodes

    def made(kind, name, **custom):
        artifact = kind()
        artifact.uri = str(folder / name)
        (folder / name).mkdir(parents=True, exist_ok=True)
        for key, value in custom.items():
            (artifact.set_int_custom_property if isinstance(value, int) else
             artifact.set_string_custom_property)(key, value)
        return artifact

    examples = made(kinds.Examples, "examples")
    statistics = made(kinds.ExampleStatistics, "statistics")
    anomalies = made(kinds.ExampleAnomalies, "anomalies")
    rows = pd.read_csv(span_files(newest_span(example_data()))[0])
    for artifact in (examples, statistics, anomalies):
        artifact.split_names = json.dumps(list(SPLITS))
    for index, split in enumerate(SPLITS):
        stats = tfdv.generate_statistics_from_dataframe(rows.iloc[index::2])
        _write(folder / "statistics" / f"Split-{split}" / "FeatureStats.pb",
               stats.SerializeToString())
        _write(folder / "anomalies" / f"Split-{split}" / ANOMALIES_FILE,
               anomalies_pb2.Anomalies().SerializeToString())
    drift = made(kinds.ExampleAnomalies, "drift")
    (folder / "drift" / RESULT_FILE).write_text(json.dumps({
        "features": [], "newest_span": None, "previous_span": None, "window": None,
        "note": "Only one span in the input: nothing to compare with yet."}))
    model_run = made(kinds.ModelRun, "model_run")
    (folder / "model_run" / "history.json").write_text(json.dumps({"loss": [0.9, 0.7]}))
    evaluation = made(kinds.ModelEvaluation, "evaluation")
    _refused_evaluation(folder / "evaluation")
    # tfx/components/evaluator/executor.py and pusher/executor.py (_MarkNotPushed), TFX 1.16.
    blessing = made(kinds.ModelBlessing, "blessing", blessed=0, current_model=str(folder / "m"),
                    current_model_id=7, baseline_model=str(folder / "b"), baseline_model_id=3)
    (folder / "blessing" / "NOT_BLESSED").write_text("")
    return {nodes.EXAMPLES: examples, nodes.STATISTICS: statistics, nodes.ANOMALIES: anomalies,
            nodes.DRIFT: drift, nodes.MODEL_RUN: model_run,
            nodes.BASELINE: made(kinds.Model, "baseline", serving_version=SERVING_VERSION,
                                 has_baseline=1),
            nodes.EVALUATION: evaluation, nodes.BLESSING: blessing,
            nodes.PUSHED_MODEL: made(kinds.PushedModel, "pushed_model", pushed=0)}


def kubeflow_outputs(folder) -> dict:
    """The RunReport step on Kubeflow: its inputs as the driver hands them over and TFX parses
    them, its executor as TFX runs it (kubeflow_v2_run_executor._run_executor: parse, Do,
    translate_executor_output), outputs at the URIs KFP 2.17.0's driver gives them."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.dsl.components.base import base_executor
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils

    from components.run_report import console, reader
    from components.run_report.component import RunReport
    from core import nodes
    from pipeline.kubeflow.step.entrypoint import restore_output_classes

    config = example_config()
    produced = refused_night(folder / "producers")
    inputs = kfp_artifacts.parse_in_step({
        output[1]: [kfp_artifacts.runtime_artifact(artifact, output[1], mlmd_id)]
        for mlmd_id, (output, artifact) in enumerate(produced.items(), 1)})
    assert inputs["blessing"][0].mlmd_artifact.custom_properties["blessed"].HasField(
        "struct_value")  # what the step really gets
    task_root = (f"{folder}/pipeline-root/{config.pipeline_name}/{RUN_ID}/{nodes.RUN_REPORT}/"
                 f"{uuid.uuid4()}")
    executor_input = restore_output_classes({"outputs": {"artifacts": {
        key: {"artifacts": [{"uri": f"{task_root}/{key}", "type": {"schemaTitle": kind}}]}
        for key, kind in (("html", "system.HTML"), ("markdown", "system.Markdown"),
                          ("metrics", "system.Metrics"))}}})
    outputs = utils.parse_raw_artifact_dict(json_format.ParseDict(
        executor_input, pipeline_spec_pb2.ExecutorInput()).outputs.artifacts, {})
    executor = RunReport.EXECUTOR_SPEC.executor_class(base_executor.BaseExecutor.Context())
    executor.Do(inputs, outputs, {"config": config.model_dump_json(),
                                  "input_base": str(example_data())})
    executor_output = pipeline_spec_pb2.ExecutorOutput()
    for key, listed in utils.translate_executor_output(outputs, {}).items():
        executor_output.artifacts[key].CopyFrom(listed)
    facts = reader.from_outputs(
        {output: inputs[output[1]][0].mlmd_artifact for output in produced}, config, RUN_ID)
    return {"console": console.summary(facts),
            "html": open(outputs["html"][0].uri).read(),
            "markdown": open(outputs["markdown"][0].uri).read(),
            "metrics": json.loads(json_format.MessageToJson(executor_output))}


def local_outputs(folder) -> dict:
    """A local run: the same artifacts recorded in a metadata store as TFX's local runner does
    (contexts pipeline, pipeline_run and node "<pipeline>.<node id>"; one OUTPUT event per
    artifact, keyed by its output key) and read back with the run's own record."""
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2 as mlmd
    from tfx.orchestration import metadata

    from components.run_report import console, render, reader
    from components.run_report.component import headline_metrics
    from components.run_report.mlmd import latest_run

    config = example_config()
    store = metadata_store.MetadataStore(
        metadata.sqlite_metadata_connection_config(str(folder / "metadata.sqlite")))
    kind = {name: store.put_context_type(mlmd.ContextType(name=name))
            for name in ("pipeline", "pipeline_run", "node")}
    step = store.put_execution_type(mlmd.ExecutionType(name="tfx.Component"))
    run = [mlmd.Context(type_id=kind["pipeline"], name=config.pipeline_name),
           mlmd.Context(type_id=kind["pipeline_run"], name="2026-12-01T02:00:00.000000")]
    for context, context_id in zip(run, store.put_contexts(run), strict=True):
        context.id = context_id
    produced = refused_night(folder / "producers")
    for node in sorted({output[0] for output in produced}):
        node_context = mlmd.Context(type_id=kind["node"], name=f"{config.pipeline_name}.{node}")
        events = []
        for (producer, key), artifact in produced.items():
            if producer == node:
                recorded = artifact.mlmd_artifact
                recorded.type_id = store.put_artifact_type(artifact.artifact_type)
                event = mlmd.Event(type=mlmd.Event.OUTPUT)
                event.path.steps.add().key = key
                events.append((recorded, event))
        store.put_execution(mlmd.Execution(type_id=step,
                                           last_known_state=mlmd.Execution.COMPLETE),
                            events, [*run, node_context])
    facts = reader.read_run(store, config, latest_run(store), ran=[o[0] for o in produced])
    return {"console": console.summary(facts), "html": render.html(facts),
            "markdown": render.markdown(facts),
            "metrics": {"artifacts": {"metrics": {"artifacts": [
                {"metadata": headline_metrics(facts)}]}}}}


def assert_not_blessed(outputs: dict) -> None:
    bounds = next(iter(example_config().evaluation.thresholds.values()))
    said = [phrase for bound, phrase in (
        (bounds.lower_bound, "below the lower bound {:g}"),
        (bounds.upper_bound, "above the upper bound {:g}"),
        (bounds.max_decrease, "a decrease over the allowed {:g}"),
        (bounds.max_increase, "an increase over the allowed {:g}")) if bound is not None
        for phrase in [phrase.format(bound)]]
    console = outputs["console"]
    assert "  blessed:    no\n" in console, console
    assert "pushed:     nothing: the model was not blessed; serving is untouched" in console
    assert f"baseline v{SERVING_VERSION}" in console
    for text in (console, outputs["html"], outputs["markdown"]):
        assert all(phrase in text for phrase in said), (said, text)
        assert "threshold {" not in text and "__value__" not in text  # no proto text
    decision = (f"Not blessed: {len(said)} threshold(s) failed (")
    assert decision in outputs["html"] and f"**{decision}" in outputs["markdown"]
    assert f"nothing was pushed and version {SERVING_VERSION} keeps serving." in outputs["html"]
    [metrics] = outputs["metrics"]["artifacts"]["metrics"]["artifacts"]
    assert metrics["metadata"]["blessed"] == 0 and metrics["metadata"]["pushed"] == 0


def test_a_refused_kubeflow_night_says_not_blessed_everywhere(tmp_path):
    outputs = kubeflow_outputs(tmp_path)
    assert_not_blessed(outputs)
    # The run id from a 2.17.0 output URI (<run id>/RunReport/<uuid>/html), not the task's name.
    assert f"<code>{RUN_ID}</code>" in outputs["html"]


def test_a_refused_local_night_says_not_blessed_everywhere(tmp_path):
    assert_not_blessed(local_outputs(tmp_path))


def _old_reading(artifact, key):
    """pipeline/report/collect.py _custom before one reader: the struct_value itself."""
    value = artifact.custom_properties.get(key)
    if value is None or value.WhichOneof("value") is None:
        return None
    found = getattr(value, value.WhichOneof("value"))
    return int(found) if isinstance(found, float) and found.is_integer() else found


def test_the_old_reading_reports_the_kubeflow_night_as_blessed(tmp_path, monkeypatch):
    """Negative control: with bool() of what the old reader returned, the Kubeflow night's
    outputs fail the check (they say blessed); the local night's pass, as they did."""
    from components.run_report import mlmd

    monkeypatch.setattr(mlmd, "property_value", _old_reading)
    monkeypatch.setattr(mlmd, "flag", lambda artifact, key: None if _old_reading(
        artifact, key) is None else bool(_old_reading(artifact, key)))
    outputs = kubeflow_outputs(tmp_path / "kubeflow")
    with pytest.raises(AssertionError):
        assert_not_blessed(outputs)
    assert "  blessed:    yes\n" in outputs["console"]
    [metrics] = outputs["metrics"]["artifacts"]["metrics"]["artifacts"]
    assert metrics["metadata"]["blessed"] == 1
    assert_not_blessed(local_outputs(tmp_path / "local"))
