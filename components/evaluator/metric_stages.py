"""Two of TFMA's per-example metric stages, with the work that repeats for every example done once.

TFMA 0.47.1 (evaluators/metrics_plots_and_validations_evaluator.py, _ComputeMetricsAndPlots)
prepares each example for its metrics in _PreprocessorDoFn, then combines every example and slice
with CombinePerKey(...).with_hot_key_fanout(8). At 75,100 eval examples and three slices
(bench/evaluator.py) these two cost 0.6 s and 2.7 s of 19.4 s, with every metric the same to the
last digit:

- _PreprocessorDoFn.process rebuilds, for every example, the same list of combiner inputs and
  the same merged StandardMetricInputsPreprocessor from the computations it was given. Where
  every computation takes the standard inputs (no preprocessor, or one plain
  StandardMetricInputsPreprocessor), PreprocessOnceDoFn builds them once in setup and applies
  them per example as TFMA does. Any other preprocessor makes it TFMA's own process.
- The hot-key fan-out spreads a slice's combining over workers. The in-memory DirectRunner has
  one worker: there the fan-out is per-example work (a random key, an extra combine stage) that
  buys nothing, and cheaper_metric_stages(one_worker=True) turns it off. Every other runner
  keeps TFMA's 8.

Both apply inside their context only (the Evaluator builds its Beam pipeline there) and only on
the TFMA they follow.
"""
from __future__ import annotations

import contextlib
import copy
import datetime
from typing import Dict, Iterable, Iterator, List, Optional, Tuple
from unittest import mock

import tensorflow_model_analysis as tfma
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from tensorflow_model_analysis import constants
from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as tfma_mpv
from tensorflow_model_analysis.metrics import metric_types, metric_util

from components.evaluator.keras_metric_inputs import TFMA_VERSION

# The runners that run a pipeline in one process, one bundle at a time (Beam's names).
_IN_MEMORY_RUNNERS = (None, "DirectRunner", "direct", "FnApiRunner")


def _standard_inputs_plan(computations) -> Optional[Tuple[List[None], object, Dict[str, bool]]]:
    """(combiner inputs, merged preprocessor or None, to_standard_metric_inputs' include
    arguments) as _PreprocessorDoFn.process builds them for every example, when no computation
    has a preprocessor of another kind; else None."""
    combiner_inputs, standard, added_default = [], [], False
    for computation in computations:
        if not computation.preprocessors:
            combiner_inputs.append(None)
            if not added_default:
                standard.append(metric_types.StandardMetricInputsPreprocessor())
                added_default = True
        elif (len(computation.preprocessors) == 1
              and type(computation.preprocessors[0])  # noqa: E721 (TFMA's exact-type test)
              == metric_types.StandardMetricInputsPreprocessor):
            combiner_inputs.append(None)
            standard.append(computation.preprocessors[0])
        else:
            return None  # per-example preprocessor outputs: TFMA's own process
    if not standard:
        return combiner_inputs, None, {}
    merged = metric_types.StandardMetricInputsPreprocessorList(standard)
    include = merged.include_filter
    return combiner_inputs, merged, {
        "include_labels": constants.LABELS_KEY in include,
        "include_predictions": constants.PREDICTIONS_KEY in include,
        "include_any_feature": (constants.FEATURES_KEY in include
                                or constants.TRANSFORMED_FEATURES_KEY in include),
        "include_attributions": constants.ATTRIBUTIONS_KEY in include}


class PreprocessOnceDoFn(tfma_mpv._PreprocessorDoFn):  # noqa: SLF001
    """TFMA's preprocessing DoFn; its per-computation set-up built once, not per example."""

    def setup(self):
        super().setup()
        self._plan = _standard_inputs_plan(self._computations)

    def process(self, extracts) -> Iterable:
        if self._plan is None:
            yield from super().process(extracts)
            return
        start_time = datetime.datetime.now()
        self._evaluate_num_instances.inc(1)
        combiner_inputs, preprocessor, include = self._plan
        output = {constants.SLICE_KEY_TYPES_KEY: extracts[constants.SLICE_KEY_TYPES_KEY],
                  tfma_mpv._COMBINER_INPUTS_KEY: list(combiner_inputs)}  # noqa: SLF001
        if preprocessor is not None:
            output[tfma_mpv._DEFAULT_COMBINER_INPUT_KEY] = [  # noqa: SLF001
                metric_util.to_standard_metric_inputs(filtered, **include)
                for filtered in preprocessor.process(copy.copy(extracts))]
        yield output
        self._timer.update(int((datetime.datetime.now() - start_time).total_seconds()))


def runs_in_one_worker(beam_args: Optional[List[str]]) -> bool:
    """Whether these Beam arguments run the pipeline on the in-memory DirectRunner."""
    options = PipelineOptions(list(beam_args or []))
    return (options.view_as(StandardOptions).runner in _IN_MEMORY_RUNNERS
            and options.view_as(DirectOptions).direct_running_mode == "in_memory")


@contextlib.contextmanager
def cheaper_metric_stages(one_worker: bool) -> Iterator[bool]:
    """TFMA builds its metric stages as described above inside the block, without the hot-key
    fan-out when the pipeline runs in one worker (runs_in_one_worker); yields whether it does
    (the TFMA these follow)."""
    if tfma.__version__ != TFMA_VERSION:
        yield False
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(tfma_mpv, "_PreprocessorDoFn", PreprocessOnceDoFn))
        if one_worker:
            stack.enter_context(mock.patch.object(
                tfma_mpv, "_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT", None))
        yield True
