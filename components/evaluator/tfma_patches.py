"""Every change the Evaluator makes to TFMA, and the one version check that allows them.

Each change replaces a private part of TFMA with one that does less work per example and gives
the same extracts and metrics (bench/README.md). All were read against TFMA 0.47.1
(requirements.lock), in the files and names below (REPLACED). On another TFMA none applies: the
Evaluator runs TFMA's own stages, slower and with the same metrics, and logs a warning naming
both versions. Read the files again before adding a version to READ_AGAINST.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator, List, Optional
from unittest import mock

import tensorflow_model_analysis as tfma
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as tfma_mpv
from tensorflow_model_analysis.metrics import tf_metric_wrapper

from components.evaluator.keras_metric_inputs import PlainInputsCombiner
from components.evaluator.metric_preprocessing import PreprocessOnceDoFn

# The TFMA versions whose files below were read for these changes.
READ_AGAINST = ("0.47.1",)
# Each change (ours), then what of TFMA's it replaces or calls (tensorflow_model_analysis/...).
REPLACED = {
    "unbatch_and_slice.custom_extractors": (
        "extractors/unbatch_extractor.py UnbatchExtractor and its private "
        "_extract_unbatched_inputs (called per batch); extractors/slice_key_extractor.py "
        "SliceKeyExtractor (its ExtractSliceKeysFn called per distinct key)"),
    "keras_metric_inputs.PlainInputsCombiner": (
        "metrics/tf_metric_wrapper.py _CompilableMetricsCombiner, its inputs as "
        "metrics/metric_util.py to_label_prediction_example_weight computes them"),
    "metric_preprocessing.PreprocessOnceDoFn": (
        "evaluators/metrics_plots_and_validations_evaluator.py _PreprocessorDoFn"),
    "no hot-key fan-out where one worker combines": (
        "evaluators/metrics_plots_and_validations_evaluator.py "
        "_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT, read by _ComputeMetricsAndPlots"),
}
# The runners that run a pipeline in one process, one bundle at a time (Beam's names).
_IN_MEMORY_RUNNERS = (None, "DirectRunner", "direct", "FnApiRunner")


def runs_in_one_worker(beam_args: Optional[List[str]]) -> bool:
    """Whether these Beam arguments run the pipeline on the in-memory DirectRunner. The hot-key
    fan-out spreads a slice's combining over workers; with one worker it is per-example work (a
    random key, an extra combine stage) that buys nothing: 2.7 s of 19.4 s at 75,100 eval
    examples and three slices (bench/evaluator.py). Every other runner keeps TFMA's 8."""
    options = PipelineOptions(list(beam_args or []))
    return (options.view_as(StandardOptions).runner in _IN_MEMORY_RUNNERS
            and options.view_as(DirectOptions).direct_running_mode == "in_memory")


@contextlib.contextmanager
def applied(one_worker: bool) -> Iterator[bool]:
    """Inside the block TFMA builds its stages with the changes above (the Evaluator builds its
    Beam pipeline there), the fan-out only where one_worker is false; yields whether it does.
    The caller passes unbatch_and_slice.custom_extractors only when it does."""
    if tfma.__version__ not in READ_AGAINST:
        logging.warning("TFMA %s: the Evaluator runs TFMA's own stages, slower, same metrics "
                        "(its changes were read against TFMA %s: %s)", tfma.__version__,
                        ", ".join(READ_AGAINST), ", ".join(REPLACED))
        yield False
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(tf_metric_wrapper, "_CompilableMetricsCombiner",
                                              PlainInputsCombiner))
        stack.enter_context(mock.patch.object(tfma_mpv, "_PreprocessorDoFn", PreprocessOnceDoFn))
        if one_worker:
            stack.enter_context(mock.patch.object(
                tfma_mpv, "_COMBINE_PER_SLICE_KEY_HOT_KEY_FANOUT", None))
        yield True
