"""components.evaluator.metric_preprocessing: TFMA's metric preprocessing with its set-up built
once gives TFMA's own per-example output (or TFMA's error)."""
from __future__ import annotations

import numpy as np
import pytest

# TensorFlow and TFMA are imported in the functions that use them: collection stays cheap
# (tests/test_collection.py).


def _canonical(value):
    """A comparable form: arrays by dtype, shape and values; mappings by their items and type."""
    from collections.abc import Mapping

    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tolist())
    if isinstance(value, Mapping):
        return (type(value).__name__, sorted((str(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_canonical(v) for v in value])
    return (type(value).__name__, value)


def _extracts():
    from tensorflow_model_analysis import constants

    base = {constants.SLICE_KEY_TYPES_KEY: [(), (("site", b"north"),)],
            constants.LABELS_KEY: np.array([2]),
            constants.PREDICTIONS_KEY: np.array([0.1, 0.2, 0.7], dtype=np.float32),
            constants.EXAMPLE_WEIGHTS_KEY: None,
            constants.FEATURES_KEY: {"site": np.array([b"north"]), "length": np.array([3.0])},
            "unrelated": np.array([1])}
    two_models = {**base,
                  constants.LABELS_KEY: {"candidate": np.array([1]), "baseline": np.array([1])},
                  constants.PREDICTIONS_KEY: {"candidate": np.array([0.3, 0.7]),
                                              "baseline": np.array([0.6, 0.4])}}
    no_features = {k: v for k, v in base.items() if k != constants.FEATURES_KEY}
    return [base, two_models, no_features]


def _computations(kind):
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.metrics import metric_specs, metric_types

    eval_config = tfma.EvalConfig(model_specs=[tfma.ModelSpec(label_key="kind")])
    computations = list(metric_specs.to_computations(
        [tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name="ExampleCount"),
                                   tfma.MetricConfig(class_name="SparseCategoricalAccuracy")])],
        eval_config=eval_config))
    # One computation asks for a feature besides the default inputs: the merged filter has it.
    features = metric_types.StandardMetricInputsPreprocessor(
        include_filter={"features": {"site": {}}}, include_default_inputs=True)
    computations.append(metric_types.MetricComputation(keys=[], preprocessors=[features],
                                                       combiner=None))
    if kind == "other":
        # A preprocessor of another kind: its output depends on the example, so TFMA runs the
        # whole preprocessing per example, and so must we.
        class Lengths(metric_types.Preprocessor):
            def process(self, extracts):
                yield {"length": extracts.get("features", {}).get("length")}
        computations.append(metric_types.MetricComputation(keys=[], preprocessors=[Lengths()],
                                                           combiner=None))
    return computations


def _outcome(dofn, extracts):
    try:
        return "output", [_canonical(o) for o in dofn.process(dict(extracts))]
    except ValueError as error:
        return "raised", str(error)


@pytest.mark.parametrize("kind", ["standard", "other"])
def test_every_example_is_preprocessed_as_tfma_does(kind):
    from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as m

    from components.evaluator.metric_preprocessing import PreprocessOnceDoFn

    computations = _computations(kind)
    tfmas, ours = m._PreprocessorDoFn(computations), PreprocessOnceDoFn(computations)
    tfmas.setup()
    ours.setup()
    # The standard kind takes the path built once; another preprocessor takes TFMA's own.
    assert (ours._plan is not None) == (kind == "standard")
    outcomes = [(_outcome(tfmas, extracts), _outcome(ours, extracts)) for extracts in _extracts()]
    assert [o for o, _ in outcomes] == [o for _, o in outcomes]
    # A feature asked for and no features extracted: TFMA's error, raised by both.
    assert outcomes[2][0][0] == "raised"
    # The feature the one computation asked for reaches the metrics' standard inputs.
    [output] = ours.process(dict(_extracts()[0]))
    [inputs] = output[m._DEFAULT_COMBINER_INPUT_KEY]
    assert set(inputs.features) == {"site"}

