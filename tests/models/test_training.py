"""The Trainer's training function in this process: precision policies, XLA, the input pipeline.

Trains on the pipeline's own ExampleGen output through Transform's graph (the session's
`pushed_run`), calling components.trainer.training.run_fn with FnArgs built as TFX's Trainer
builds them.
"""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from core.config import TrainingConfig
from tests.models.serving_checks import check_serving_model, eval_examples

pytestmark = pytest.mark.e2e
STEPS = 300
# Stated tolerance of a model trained under a mixed policy against the float32 one (same seed,
# data and steps), on the eval split's serving_default outputs: mean |p - p_float32| <= 0.03 and
# the same predicted class on >= 95% of the examples. Half-precision rounding moves the training
# path, so a borderline example can flip; measured on CPU: float16 0.004 / 98.8%, bfloat16
# 0.011 / 97.6%. With the float32 model's own weights, the rounding alone stays within
# NUMERIC_TOLERANCE of its probabilities.
MAX_MEAN_DIFF = 0.03
MIN_SAME_CLASS = 0.95
NUMERIC_TOLERANCE = {"mixed_float16": 0.005, "mixed_bfloat16": 0.03}


def _train(artifacts, exec_properties, out, **overrides):
    from components.trainer.training import run_fn
    from pipeline.kubeflow.training_job.worker import fn_args_for

    props = json.loads(exec_properties(f"{out.name}.json", training__train_steps=STEPS,
                                       **overrides).read_text())
    fn_args = fn_args_for(props, str(artifacts.examples), str(artifacts.transform_graph),
                          str(out / "model"), str(out / "model_run"))
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TF_CONFIG", raising=False)
        return run_fn(fn_args), out / "model" / "Format-Serving"


@pytest.fixture(scope="module")
def examples(artifacts):
    return eval_examples(artifacts.eval_files)


@pytest.fixture(scope="module")
def float32_model(artifacts, exec_properties, tmp_path_factory, examples):
    result, model_dir = _train(artifacts, exec_properties, tmp_path_factory.mktemp("float32"))
    probabilities = check_serving_model(model_dir, artifacts.single_device_model, examples)
    return result, probabilities


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_each_precision_exports_float32_serving_outputs_that_agree_with_float32(
        policy, artifacts, exec_properties, tmp_path, examples, float32_model, caplog):
    import tensorflow as tf
    import tf_keras as keras
    from components.trainer import training

    reference_result, reference = float32_model
    with caplog.at_level(logging.INFO):
        result, model_dir = _train(artifacts, exec_properties, tmp_path / policy,
                                   training__precision=policy)
    # The model computes in half precision, its output layer stays float32.
    model = result.model
    half = "float16" if policy == "mixed_float16" else "bfloat16"
    assert model.get_layer("dense_0").compute_dtype == half
    assert model.get_layer("probabilities").compute_dtype == "float32"
    assert model.output.dtype == tf.float32
    # float16 needs loss scaling against gradient underflow; bfloat16 does not.
    assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer) == (
        policy == "mixed_float16")
    if policy == "mixed_float16" and not tf.config.list_physical_devices("GPU"):
        text = caplog.text
        assert "without a GPU" in text
        assert text.index("without a GPU") < text.index("training on")  # before training
    assert result.loss[-1] < result.first_loss

    probabilities = check_serving_model(model_dir, artifacts.single_device_model, examples)
    mean_diff = float(np.abs(probabilities - reference).mean())
    same_class = float(np.mean(probabilities.argmax(1) == reference.argmax(1)))
    print(f"\n{policy}: mean |p - p_float32| = {mean_diff:.4f}, same class {same_class:.3f}")
    assert mean_diff <= MAX_MEAN_DIFF
    assert same_class >= MIN_SAME_CLASS

    # Rounding alone: the float32 model's weights in the same network built under this policy.
    spec, output, features, fn_args = _transformed_eval(artifacts, exec_properties)
    custom = _custom(exec_properties)
    twin = training.new_model(spec, training.task_head(custom, fn_args, output, spec), output,
                              custom["model"], TrainingConfig.model_validate(
                                  {**custom["training"], "precision": policy}),
                              custom["model_module"])
    twin.set_weights(reference_result.model.get_weights())
    rounding = np.abs(twin.predict(features, verbose=0)
                      - reference_result.model.predict(features, verbose=0)).max()
    print(f"{policy}: same weights, max |p - p_float32| = {rounding:.4f}")
    assert rounding <= NUMERIC_TOLERANCE[policy]


def _custom(exec_properties) -> dict:
    return json.loads(json.loads(exec_properties().read_text())["custom_config"])


def _transformed_eval(artifacts, exec_properties):
    from components.trainer import training
    from models.features import FeatureSpec
    from pipeline.kubeflow.training_job.worker import fn_args_for
    import tensorflow_transform as tft

    props = json.loads(exec_properties().read_text())
    fn_args = fn_args_for(props, str(artifacts.examples), str(artifacts.transform_graph),
                          "/unused", "/unused")
    spec = FeatureSpec.from_custom_config(_custom(exec_properties))
    output = tft.TFTransformOutput(fn_args.transform_graph_path)
    features, _ = training.transformed_arrays(fn_args.eval_files, fn_args.data_accessor,
                                              output, spec)
    return spec, output, features, fn_args


def test_xla_and_uncached_nondeterministic_input_train_and_export(
        artifacts, exec_properties, tmp_path, examples):
    result, model_dir = _train(artifacts, exec_properties, tmp_path / "xla",
                               training__jit_compile=True, training__cache_dataset=False,
                               training__deterministic=False, training__steps_per_execution=10)
    assert result.model._jit_compile
    assert result.loss[-1] < result.first_loss
    assert result.examples_per_second > 0
    check_serving_model(model_dir, artifacts.single_device_model, examples)


def test_input_pipeline_splits_the_global_batch_and_shards_disjointly(artifacts,
                                                                       exec_properties):
    import tensorflow as tf
    from components.trainer import training

    spec, output, features, fn_args = _transformed_eval(artifacts, exec_properties)
    settings = TrainingConfig.model_validate(_custom(exec_properties)["training"])

    def rows(dataset):
        return sorted(tuple(float(x[k][i, 0]) for k in sorted(x)) + (int(y[i]),)
                      for x, y in dataset for i in range(int(y.shape[0])))

    everything = rows([(
        {k: tf.constant(v) for k, v in features.items()},
        tf.zeros(len(next(iter(features.values()))), tf.int64))])
    shards = []
    for index in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=index,
                                             num_replicas_in_sync=2)
        one_pass = training.make_dataset(fn_args.eval_files, fn_args.data_accessor, output, spec,
                                         settings, global_batch=8, train=False,
                                         endless=False)(context)
        features_batch, label = next(iter(one_pass))
        assert label.shape[0] == 4  # per-replica batch = global 8 / 2 replicas
        assert set(features_batch) == {f"{name}_xf" for name in spec.inputs}
        shards.append(rows(one_pass))
        # The training stream of the same shard never ends (no worker runs out of data).
        endless = training.make_dataset(fn_args.train_files, fn_args.data_accessor, output,
                                        spec, settings, global_batch=8, train=True)(context)
        assert sum(1 for _ in endless.take(500)) == 500
    # The two shards split the eval split: together every example once (labels aside).
    assert shards[0] and shards[1]
    assert sorted(r[:-1] for r in shards[0] + shards[1]) == [r[:-1] for r in everything]
