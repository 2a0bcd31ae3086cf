"""TFMA's Keras-metric combiner and ours (components.evaluator.keras_metric_inputs) accumulate the
same label, prediction and weight arrays for every example, plain or not, and fail on the same ones;
whole evaluations give the same metrics to the last digit (tests/components/test_evaluator.py
and bench/evaluator.py)."""
from __future__ import annotations

import pytest

# TensorFlow and TFMA are imported in the functions that use them: collection stays cheap
# (tests/test_collection.py).


def _eval_config(models=("",), prediction_key="probabilities", label_key="kind_xf"):
    import tensorflow_model_analysis as tfma

    return tfma.EvalConfig(model_specs=[
        tfma.ModelSpec(name=name, prediction_key=prediction_key, label_key=label_key,
                       is_baseline=name == "baseline") for name in models])


def _combiners(eval_config, model_name="", **options):
    """(TFMA's combiner, ours) for SparseCategoricalAccuracy, as TFMA builds them."""
    import tf_keras
    from tensorflow_model_analysis.metrics import tf_metric_wrapper

    from components.evaluator import tfma_patches
    from components.evaluator.keras_metric_inputs import PlainInputsCombiner

    def build():
        [computation] = tf_metric_wrapper.tf_metric_computations(
            [tf_keras.metrics.SparseCategoricalAccuracy()], eval_config=eval_config,
            model_name=model_name, **options)
        return computation.combiner

    tfmas = build()
    with tfma_patches.applied(one_worker=False) as active:
        ours = build()
    assert active and type(ours) is PlainInputsCombiner
    assert type(tfmas) is tf_metric_wrapper._CompilableMetricsCombiner  # noqa: SLF001 restored
    return tfmas, ours


def _accumulated(combiner, elements):
    """The inputs combiner accumulated for each element, or the error it raised."""
    from tensorflow_model_analysis.metrics import metric_types

    results = []
    for element in elements:
        accumulator = combiner.create_accumulator()
        try:
            combiner.add_input(accumulator, metric_types.StandardMetricInputs(element))
        except Exception as error:  # noqa: BLE001  (the same error both ways is the point)
            results.append(("raised", type(error).__name__))
            continue
        results.append([list(args) for args in accumulator.get_inputs(0)])
    return results


def _assert_same(ours, tfmas):
    import numpy as np

    for i, (a, b) in enumerate(zip(ours, tfmas, strict=True)):
        if isinstance(b, tuple):
            assert a == b, f"element {i}"
            continue
        for arg_a, arg_b in zip(a, b, strict=True):
            for x, y in zip(arg_a, arg_b, strict=True):
                assert (x.dtype, x.shape) == (y.dtype, y.shape), f"element {i}: {x!r} {y!r}"
                assert np.array_equal(x, y), f"element {i}: {x!r} {y!r}"


def _elements(model=None):
    """Examples as TFMA's metrics see them: plain ones and every shape that is not plain."""
    import numpy as np

    probabilities = np.array([0.1, 0.2, 0.7], dtype=np.float32)

    def by_model(value):
        return {model: value, "baseline": value} if model else value

    return [
        {"labels": np.array([2]), "predictions": by_model(probabilities)},
        {"labels": np.array(1.0), "predictions": by_model(np.array(0.4, dtype=np.float32))},
        {"labels": np.array([[0]]), "predictions": by_model(probabilities.reshape(1, 3))},
        {"labels": np.array([-1]), "predictions": by_model(probabilities)},
        {"labels": np.array([1], dtype=np.float32),
         "predictions": by_model({"probabilities": probabilities,
                                  "class_name": np.array([b"b"], dtype=object)})},
        {"labels": np.array([2]), "predictions": by_model(probabilities),
         "example_weights": np.array([3.0])},
        {"labels": by_model({"kind_xf": np.array([1])}), "predictions": by_model(probabilities)},
        {"labels": by_model(np.array([1])), "predictions": by_model(probabilities)},
        {"labels": {"kind_xf/a": np.array([1])}, "predictions": by_model(probabilities)},
        {"labels": np.array([b"a"], dtype=object), "predictions": by_model(probabilities)},
        {"labels": None, "predictions": by_model(probabilities)},
        {"labels": np.array([0]), "predictions": by_model({"logits": probabilities})},
        {"labels": np.array([0]), "predictions": by_model({"other": probabilities})},
        {"labels": np.array([0]), "predictions": by_model([0.1, 0.9])},
        {"labels": np.array([0]), "predictions": {"not-the-model": probabilities}},
    ]


@pytest.mark.parametrize("models, model_name", [(("",), ""), (("candidate", "baseline"),
                                                              "candidate")])
def test_every_example_accumulates_what_tfma_accumulates(models, model_name):
    from tensorflow_model_analysis.metrics import metric_types

    from components.evaluator.keras_metric_inputs import plain_inputs

    eval_config = _eval_config(models)
    tfmas, ours = _combiners(eval_config, model_name)
    elements = _elements(model_name)
    expected = _accumulated(tfmas, elements)
    # Both paths are in the list: plain examples, and ones TFMA's function takes (or fails on).
    # With two models, a label keyed by model and then by label key is not plain (TFMA looks up
    # the label key first: it raises there).
    plain = [plain_inputs(metric_types.StandardMetricInputs(e), model_name, "probabilities",
                          "kind_xf") is not None for e in elements]
    assert sum(plain) == (7 if model_name else 8) and ("raised", "ValueError") in expected
    _assert_same(_accumulated(ours, elements), expected)


def test_without_a_prediction_key_the_first_of_tfmas_keys_is_taken():
    import numpy as np

    tfmas, ours = _combiners(_eval_config(prediction_key=""))
    elements = [{"labels": np.array([1]),
                 "predictions": {"logits": np.array([5.0, 1.0]),
                                 "probabilities": np.array([0.3, 0.7])}},
                {"labels": np.array([1]), "predictions": {"class_ids": np.array([1])}}]
    _assert_same(_accumulated(ours, elements), _accumulated(tfmas, elements))


@pytest.mark.parametrize("option", ["example_weighted", "sub_key"])
def test_weighted_or_sub_keyed_combiners_prepare_inputs_with_tfmas_function(option):
    import numpy as np
    from tensorflow_model_analysis.metrics import metric_types

    options = {"example_weighted": {"example_weighted": True},
               "sub_key": {"sub_key": metric_types.SubKey(top_k=2)}}[option]
    tfmas, ours = _combiners(_eval_config(), **options)
    assert not ours._plain  # noqa: SLF001
    elements = [{"labels": np.array([2]), "predictions": np.array([0.1, 0.2, 0.7]),
                 "example_weights": np.array([3.0])}]
    _assert_same(_accumulated(ours, elements), _accumulated(tfmas, elements))


def test_class_weights_or_a_named_output_are_not_plain():
    from components.evaluator.keras_metric_inputs import PlainInputsCombiner

    def combiner(outputs, class_weights):
        return PlainInputsCombiner({o: [] for o in outputs}, {o: [] for o in outputs}, None,
                                   _eval_config(), "", None, None, class_weights, False)

    assert combiner([""], None)._plain  # noqa: SLF001
    assert not combiner([""], {0: 2.0})._plain  # noqa: SLF001
    assert not combiner(["head"], None)._plain  # noqa: SLF001

