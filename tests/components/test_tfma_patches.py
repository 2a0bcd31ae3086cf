"""components.evaluator.tfma_patches: the Evaluator's changes to TFMA apply inside their block
and on the TFMA they were read against only; on another one the Executor runs TFMA's own stages
and says so in the log (the metrics are TFMA's both ways: tests/components/test_evaluator.py)."""
from __future__ import annotations

import logging

import pytest

# TensorFlow, Beam, TFX and TFMA are imported in the functions that use them: collection stays
# cheap (tests/test_collection.py).


def _tfmas_own():
    """The private parts of TFMA the changes replace, as they are now."""
    from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as m
    from tensorflow_model_analysis.metrics import tf_metric_wrapper

    return (tf_metric_wrapper._CompilableMetricsCombiner, m._PreprocessorDoFn,  # noqa: SLF001
            m._COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT)  # noqa: SLF001


def test_the_changes_are_read_against_the_tfma_that_is_locked():
    import tensorflow_model_analysis as tfma

    from components.evaluator import tfma_patches

    # requirements.lock's TFMA: a lock that moves on without rereading TFMA's files fails here.
    assert tfma.__version__ in tfma_patches.READ_AGAINST


@pytest.mark.parametrize("beam_args, one_worker", [
    ([], True),
    (["--runner=DirectRunner"], True),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], False),
    (["--direct_running_mode=multi_threading"], False),
    (["--runner=DataflowRunner", "--project=p", "--region=r"], False),
    (["--runner=FlinkRunner"], False),
])
def test_only_the_in_memory_direct_runner_counts_as_one_worker(beam_args, one_worker):
    from components.evaluator.tfma_patches import runs_in_one_worker

    assert runs_in_one_worker(beam_args) is one_worker


def _stage_names(one_worker):
    """The transforms TFMA builds for an evaluation inside tfma_patches.applied."""
    import apache_beam as beam
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis import constants
    from tfx_bsl.tfxio import tf_example_record

    from components.evaluator import tfma_patches

    eval_config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(label_key="kind", prediction_key="probabilities")],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name="ExampleCount")])])
    tfx_io = tf_example_record.TFExampleBeamRecord(
        physical_format="inmem", telemetry_descriptors=["test"],
        raw_record_column_name=constants.ARROW_INPUT_COLUMN)
    pipeline = beam.Pipeline()
    with tfma_patches.applied(one_worker) as applied:
        _ = (pipeline | beam.Create([b""]) | tfx_io.BeamSource()
             | tfma.ExtractEvaluateAndWriteResults(eval_config=eval_config, output_path="unused"))
    assert applied
    transforms = pipeline.to_runner_api().components.transforms.values()
    return [t.unique_name for t in transforms]


@pytest.mark.slow
def test_the_hot_key_fan_out_stays_wherever_more_than_one_worker_combines():
    in_memory, elsewhere = _stage_names(one_worker=True), _stage_names(one_worker=False)
    assert any("CombineMetricsPerSlice" in name for name in in_memory)
    assert not any("SplitHotCold" in name for name in in_memory)
    assert any("CombineMetricsPerSlice" in name and "SplitHotCold" in name for name in elsewhere)


def test_tfmas_own_stages_are_back_after_the_block():
    from components.evaluator import tfma_patches
    from components.evaluator.keras_metric_inputs import PlainInputsCombiner
    from components.evaluator.metric_preprocessing import PreprocessOnceDoFn

    original = _tfmas_own()
    with pytest.raises(RuntimeError), tfma_patches.applied(True):
        assert _tfmas_own() == (PlainInputsCombiner, PreprocessOnceDoFn, None)
        raise RuntimeError("the Beam pipeline failed")
    assert _tfmas_own() == original


def test_another_tfma_keeps_its_own_stages_and_the_log_says_so(monkeypatch, caplog):
    import tensorflow_model_analysis as tfma

    from components.evaluator import tfma_patches

    original = _tfmas_own()
    monkeypatch.setattr(tfma, "__version__", "0.48.0")
    with caplog.at_level(logging.WARNING), tfma_patches.applied(True) as applied:
        assert not applied
        assert _tfmas_own() == original
    [record] = [r for r in caplog.records if "TFMA 0.48.0" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "TFMA's own stages" in record.getMessage() and "0.47.1" in record.getMessage()


def _executor_run(monkeypatch, tmp_path, has_baseline):
    """What our Executor hands TFX's Evaluator executor: (inputs, exec_properties, whether the
    Keras-metric combiner was ours while TFX's Do ran)."""
    from tensorflow_model_analysis.metrics import tf_metric_wrapper
    from tfx.components.evaluator import executor as tfx_evaluator
    from tfx.types import standard_artifacts

    from components.evaluator.component import Executor
    from components.evaluator.keras_metric_inputs import PlainInputsCombiner
    from components.serving_baseline.component import HAS_BASELINE

    seen = {}

    def tfx_do(self, input_dict, output_dict, exec_properties):
        seen.update(inputs=input_dict, properties=exec_properties,
                    ours=tf_metric_wrapper._CompilableMetricsCombiner  # noqa: SLF001
                    is PlainInputsCombiner)

    monkeypatch.setattr(tfx_evaluator.Executor, "Do", tfx_do)
    baseline = standard_artifacts.Model()
    baseline.uri = str(tmp_path / "serving")
    baseline.set_int_custom_property(HAS_BASELINE, int(has_baseline))
    Executor().Do({"baseline_model": [baseline]}, {}, {"example_splits": '["eval"]'})
    return seen


def test_the_executor_uses_the_changes_on_the_tfma_they_were_read_against(monkeypatch, tmp_path):
    seen = _executor_run(monkeypatch, tmp_path, has_baseline=False)
    assert seen["ours"]
    assert seen["properties"]["custom_extractors"] == (
        "components.evaluator.unbatch_and_slice.custom_extractors")
    assert seen["inputs"]["baseline_model"] == []  # nothing serves: no baseline
    assert len(_executor_run(monkeypatch, tmp_path, has_baseline=True)["inputs"][
        "baseline_model"]) == 1


def test_on_another_tfma_the_executor_runs_tfmas_own_extractors_and_stages(monkeypatch, tmp_path,
                                                                            caplog):
    import tensorflow_model_analysis as tfma

    monkeypatch.setattr(tfma, "__version__", "0.48.0")
    with caplog.at_level(logging.WARNING):
        seen = _executor_run(monkeypatch, tmp_path, has_baseline=False)
    assert not seen["ours"]
    assert "custom_extractors" not in seen["properties"]  # TFX then runs TFMA's defaults
    assert any("TFMA 0.48.0" in r.getMessage() for r in caplog.records)
