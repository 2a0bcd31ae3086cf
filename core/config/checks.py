"""What a night is judged by: the evaluation gate, drift between spans, skew between training
and serving."""
from __future__ import annotations

from typing import Dict, Literal, Optional

from pydantic import Field, ValidationInfo, field_validator, model_validator

from core import tasks
from core.config.base import Section


# The model names of the EvalConfig (components/evaluator/eval_config.py), under which TFMA writes
# each model's metrics: the run summary and the report read them back without loading TFMA.
CANDIDATE, BASELINE = "candidate", "baseline"


class ThresholdConfig(Section):
    lower_bound: Optional[float] = None
    upper_bound: Optional[float] = None
    max_decrease: Optional[float] = Field(None, ge=0.0)
    max_increase: Optional[float] = Field(None, ge=0.0)

    @model_validator(mode="after")
    def _one_direction(self) -> "ThresholdConfig":
        if self.max_decrease is not None and self.max_increase is not None:
            raise ValueError("set max_decrease (higher is better) or max_increase (lower is "
                             "better), not both")
        if all(v is None for v in (self.lower_bound, self.upper_bound, self.max_decrease,
                                   self.max_increase)):
            raise ValueError("a threshold needs at least one bound")
        return self


class EvaluationConfig(Section):
    # Keyed by TFMA / Keras metric class name, e.g. SparseCategoricalAccuracy.
    thresholds: Dict[str, ThresholdConfig]
    # overall: the thresholds judge the whole eval split; every_slice: also each feature slice
    # (island=Biscoe, sex=female, ...), however few examples it holds.
    threshold_slices: Literal["overall", "every_slice"] = "overall"

    @field_validator("thresholds")
    @classmethod
    def _known_metrics(cls, thresholds: Dict[str, ThresholdConfig], info: ValidationInfo
                       ) -> Dict[str, ThresholdConfig]:
        if not thresholds:
            # TFX's Evaluator blesses nothing without thresholds (tfx#5148): fail loudly instead.
            raise ValueError("declare at least one threshold, or no model will ever be blessed")
        # Checked here, on load, so both runners refuse it before anything is built; from the
        # table of the names each task evaluates (core/tasks.py), which a test keeps equal to
        # what TFMA instantiates (tests/components/test_eval_config.py), so loading a config
        # never imports TFMA or TensorFlow.
        known = {name for task in tasks.TASKS.values() for name in task.threshold_metrics}
        problems = [f"'{name}' is not a TFMA or Keras metric class name this template evaluates "
                    f"(known: {', '.join(sorted(known))})" for name in thresholds
                    if name not in known]
        if problems:
            raise ValueError("; ".join(problems))
        return thresholds


def _unit_thresholds(thresholds: Dict[str, float]) -> Dict[str, float]:
    """Drift's and skew's per-feature thresholds: a divergence or distance, in (0, 1]."""
    bad = {k: v for k, v in thresholds.items() if not 0.0 < v <= 1.0}
    if bad:
        raise ValueError(f"thresholds must be in (0, 1]: {bad}")
    return thresholds


class DriftConfig(Section):
    """Drift between the newest span and the one before (components/drift_gate/component.py)."""
    # stop: the run fails and nothing is pushed; warn: the run goes on, the report shows it.
    on_drift: Literal["stop", "warn"] = "stop"
    # Defaults: Jensen-Shannon divergence for numeric features, L-infinity distance (the largest
    # change of one value's share) for categorical ones and the label; both between 0 and 1.
    numeric_threshold: float = Field(0.25, gt=0.0, le=1.0)
    categorical_threshold: float = Field(0.25, gt=0.0, le=1.0)
    # Per feature, overriding the default of its kind.
    thresholds: Dict[str, float] = {}

    _in_range = field_validator("thresholds")(classmethod(
        lambda cls, thresholds: _unit_thresholds(thresholds)))


class SkewConfig(Section):
    """Training/serving skew: the newest serving span (the logged requests, core/serving_log.py)
    against the training window (components/skew_gate/component.py)."""
    # warn: the run goes on and the report shows the skew; stop: the run fails, nothing is pushed.
    on_skew: Literal["stop", "warn"] = "warn"
    # TFDV's skew comparator: Jensen-Shannon divergence for numeric features (and numeric
    # lists), L-infinity distance for categorical ones, ids and categorical lists; in (0, 1].
    numeric_threshold: float = Field(0.25, gt=0.0, le=1.0)
    categorical_threshold: float = Field(0.25, gt=0.0, le=1.0)
    # Per model input, overriding the default of its kind.
    thresholds: Dict[str, float] = {}
    # Where the request sink writes the serving spans (span-YYYYMMDD/ folders, the data's
    # file_pattern); unset: <runner.output_dir>/requests.
    serving_base: Optional[str] = None
    # A serving span with fewer rows (a day just begun) is skipped for the one before.
    min_rows: int = Field(100, ge=1)
    # A list whose mean length at serving is below this share of training's is skewed (histories
    # cut to one item).
    list_length_ratio: float = Field(0.5, gt=0.0, lt=1.0)
    # A feature present in fewer rows at serving than this share of training's presence is
    # missing (a list counts as present when it holds a value).
    presence_ratio: float = Field(0.5, gt=0.0, le=1.0)
    # A folder node_exporter's textfile collector reads: the run report also writes the skew
    # figures there (components/run_report/skew_textfile.py) for the ServingSkewHigh alert.
    prometheus_textfile_dir: Optional[str] = None

    _in_range = field_validator("thresholds")(classmethod(
        lambda cls, thresholds: _unit_thresholds(thresholds)))
