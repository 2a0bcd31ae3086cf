"""Every registered task kind (core/tasks.py TASKS) through every part that reads it: the config
(its settings and thresholds as pipeline.init writes them, the metrics that fit, the reader's
label kind), the EvalConfig (the score, the loss, the default metrics), its head (Transform's
label encoding through real TFT, the output layer, the compiled loss, the serving outputs) and
the predict client's answer. A new kind that lacks a piece fails here; tests/models/test_tasks.py
checks what each kind's head computes, tests/test_init_e2e.py runs each through the pipeline."""
from __future__ import annotations

import json

import pytest

from core.tasks import TASKS, LabelSample
from tests.helpers import example_config, write_config

# A label column per kind, typed as the kind reads it: two values, which every kind can learn
# (pipeline.init's rules: two classes, yes or no, a number).
LABEL_VALUES = {"text": ["no", "yes", "no", "yes", "yes", "no"],
                "number": [1.5, 2.0, 3.25, 4.0, 1.5, 2.0]}
X = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5]
C = ["a", "b", "a", "c", "b", "a"]


def label_sample(task) -> LabelSample:
    values = LABEL_VALUES[task.label]
    counts = {str(v): sum(1 for w in values if str(w) == str(v)) for v in values}
    return LabelSample(f"y_{task.kind}", counts, numeric=task.label == "number")


def kind_config(tmp_path, task):
    """The bundled config with this kind, its settings and thresholds as pipeline.init writes
    them for a label that fits it."""
    from core.config import load_config

    label = label_sample(task)
    settings, why = task.fit_label(label, "inferred")
    assert why.startswith("inferred: ")
    changes = {"task": {"kind": task.kind, **settings},
               "evaluation.thresholds": task.init_thresholds(label)}
    features = example_config().features
    if task.label == "number":  # the example's first numeric column as the label
        changes.update({"features.label": features.numeric[0],
                        "features.numeric": features.numeric[1:],
                        "features.categorical": [*features.categorical, features.label]})
    return load_config(write_config(tmp_path / task.kind, changes))


@pytest.mark.parametrize("kind", list(TASKS))
def test_each_kind_loads_and_checks_its_config(tmp_path, kind):
    from core.config import ConfigError, load_config

    task = TASKS[kind]
    config = kind_config(tmp_path, task)
    assert config.task.kind == kind and set(config.task.settings) == set(task.settings)
    assert set(task.required) <= set(task.settings)
    assert config.reader_features["label_kind"] == task.label
    assert set(task.default_metrics) <= set(task.threshold_metrics)
    # Every metric that fits loads with the kind; one that fits no kind of this label is named.
    any_bounds = {"lower_bound": 0.0}
    path = write_config(tmp_path / "all", {
        "task": config.task.model_dump(mode="json"),
        "features": config.features.model_dump(mode="json"),
        "evaluation.thresholds": {name: any_bounds for name in task.threshold_metrics}})
    assert load_config(path).evaluation.thresholds.keys() == set(task.threshold_metrics)
    others = {n for t in TASKS.values() for n in t.threshold_metrics} - set(task.threshold_metrics)
    for name in sorted(others)[:1]:
        with pytest.raises(ConfigError, match=f"thresholds.{name} does not fit task.kind "
                                              f"'{kind}'"):
            load_config(write_config(tmp_path / "misfit", {
                "task": config.task.model_dump(mode="json"),
                "features": config.features.model_dump(mode="json"),
                "evaluation.thresholds": {name: any_bounds}}))


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(TASKS))
def test_each_kind_has_an_eval_config_tfma_computes(tmp_path, kind):
    from components.evaluator.eval_config import build_eval_config, metric_problem

    task = TASKS[kind]
    config = kind_config(tmp_path, task)
    eval_config = build_eval_config(config)
    assert {s.prediction_key for s in eval_config.model_specs} == {task.outputs[-1]}
    metrics = {m.class_name: m for m in eval_config.metrics_specs[0].metrics}
    assert {*task.default_metrics, *config.evaluation.thresholds, task.loss,
            "ExampleCount"} == set(metrics)
    assert metrics[task.loss].config == '"name": "loss"'
    assert [p for p in map(metric_problem, sorted(metrics)) if p] == []


@pytest.fixture(scope="module")
def every_label(tmp_path_factory):
    """One real TFT analysis whose outputs are every kind's label, each encoded by its head
    (components/heads.py), beside a numeric and a categorical feature."""
    import tensorflow_transform as tft
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2
    from components import heads
    from models.preprocessing import preprocessing_fn
    from tests.models.transform_rows import run_transform

    sections = {}
    for kind, task in TASKS.items():
        settings, _ = task.fit_label(label_sample(task), "inferred")
        sections[kind] = {"kind": kind, **settings}
    from core.config import FeaturesConfig

    custom = {"features": FeaturesConfig(label="unused", numeric=["x"], categorical=["c"]
                                         ).model_dump(mode="json"),
              "preprocessing": {"num_oov_buckets": 1}}

    def fn(inputs):
        outputs = preprocessing_fn(inputs, custom)
        for kind in TASKS:
            spec = kind_spec(kind)
            outputs[spec.label_xf] = heads.encode_label(inputs[spec.label], spec, sections[kind])
        return outputs

    columns = {"x": X, "c": C, **{f"y_{kind}": LABEL_VALUES[task.label]
                                  for kind, task in TASKS.items()}}
    instances = [{name: [values[i]] for name, values in columns.items()} for i in range(len(X))]
    schema = text_format.Parse("".join(
        f'feature {{ name: "{name}" type: {"BYTES" if isinstance(values[0], str) else "FLOAT"} '
        'value_count { min: 1 max: 1 } }\n' for name, values in columns.items()),
        schema_pb2.Schema())
    rows, output = run_transform(tmp_path_factory.mktemp("every_label"), fn, instances, schema)
    assert isinstance(output, tft.TFTransformOutput)
    return rows, output, sections


def kind_spec(kind):
    from models.features import FeatureSpec

    return FeatureSpec(label=f"y_{kind}", numeric=["x"], categorical=["c"])


@pytest.mark.parametrize("kind", list(TASKS))
def test_each_kind_has_a_head_whose_outputs_the_client_prints(every_label, tmp_path, kind):
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras
    from components import heads
    from models.features import as_model_inputs
    from models.model import build_model
    from pipeline.predict import Row, ServingError, format_prediction

    task = TASKS[kind]
    rows, output, sections = every_label
    spec = kind_spec(kind)
    labels = np.array([r[spec.label_xf] for r in rows])
    head = heads.fitted(sections[kind], output, spec, lambda: labels)
    assert isinstance(head, heads.head_class(task)) and head.task is task
    model = build_model(spec, spec.categorical_sizes({"c": output.vocabulary_size_by_name("c")}),
                        head, hidden_units=[4], dropout=0.0, learning_rate=0.01)
    assert isinstance(model.loss, getattr(keras.losses, task.loss))
    features = as_model_inputs({k: tf.constant([r[k] for r in rows]) for k in rows[0]}, spec)
    model.fit(features, tf.constant(labels), epochs=1, verbose=0)  # the label fits the loss
    answers = head.serving_outputs(tf.cast(model(features), tf.float32))
    assert set(answers) == set(task.outputs)
    assert answers[task.outputs[-1]].dtype == tf.float32  # the score TFMA reads
    assert all(int(a.shape[0]) == len(rows) for a in answers.values())

    # Each row as TF Serving's REST row format writes it: named outputs, or the value alone when
    # the signature has one (json_tensor.cc, MakeRowFormatJsonFromTensors).
    def rest_row(i):
        row = {name: (v[i].decode() if isinstance(v[i], bytes) else v[i].tolist())
               for name, v in ((n, a.numpy()) for n, a in answers.items())}
        return json.loads(json.dumps(row if len(row) > 1 else next(iter(row.values()))))

    config = kind_config(tmp_path, task)
    for i in range(len(rows)):
        line = format_prediction(i + 1, Row(i + 2, {}), rest_row(i), config.task)
        prefix, answer = line.split(": ", 1)
        assert prefix == f"row {i + 1} (line {i + 2})" and answer.strip(), line
    with pytest.raises(ServingError, match=f"a task.kind {kind} model returns"):
        format_prediction(1, Row(2, {}), {}, config.task)
