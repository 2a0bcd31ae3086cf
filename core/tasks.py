"""Task kinds: what the model predicts from the label, one `Task` per kind (README "Tasks").

Every part reads its kind's facts from the Task, and from nowhere else:
- the config (core/config/training.py): `task.kind`, the kind's settings, the threshold
  metrics that fit;
- the CSV reader and the drift gate: whether the label is text or a number;
- Transform, the Trainer and the export (components/heads.py): the head the Task names, by class
  name, which encodes the label, adds the output layer, compiles `loss` and returns `outputs`;
- the Evaluator (components/evaluator/eval_config.py): the score TFMA reads (the last output),
  the same loss, the default metrics;
- the predict client (pipeline/predict.py): how an answer is printed;
- pipeline.init: whether a label fits the kind, and thresholds that beat a trivial model.
A new kind is one more Task in TASKS (with a head in components/heads.py when no head there
fits); tests/models/test_task_kinds.py walks every registered Task through each of these parts.
TensorFlow-free: the config and the predict client load it.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Annotated, Any, Callable, Dict, Literal, Mapping, Optional, Tuple

from pydantic import BeforeValidator, Field

from core.csv_cells import number_problem

# pipeline.init: a numeric label with more distinct values than this is a number to predict.
MAX_NUMERIC_CLASSES = 20
# pipeline.init: classes a label may have; more, and it is probably a number or an id.
MAX_CLASSES = 100
# pipeline.init: a two-valued label's positive class, when exactly one value reads as one of
# these (case ignored).
POSITIVE_WORDS = ("1", "1.0", "true", "t", "yes", "y", "positive", "pos")
BINARY_AUC_FLOOR = 0.7


class LabelMismatch(ValueError):
    """A label this kind cannot learn (pipeline.init); the message says what to do."""


@dataclasses.dataclass(frozen=True)
class LabelSample:
    """A label column as pipeline.init samples it."""
    name: str
    counts: Mapping[str, int]  # value -> rows
    numeric: bool  # every present value is a number the CSV reader accepts


@dataclasses.dataclass(frozen=True)
class Task:
    kind: str
    # How the CSV reader types the label: class names are text ("0" and "1" included).
    label: Literal["text", "number"]
    # The TF side, a class of components/heads.py: label encoding, output layer, serving outputs.
    head: str
    # What both prediction signatures return; the last is the score TFMA evaluates.
    outputs: Tuple[str, ...]
    # The Keras loss class the head compiles and the Evaluator declares as TFMA's "loss".
    loss: str
    # Computed by the Evaluator beside the thresholds' metrics.
    default_metrics: Tuple[str, ...]
    # The TFMA / Keras metric class names evaluation.thresholds may use with this kind.
    threshold_metrics: Tuple[str, ...]
    # The client's text for one prediction (a mapping of `outputs`), given the kind's settings.
    answer: Callable[[Mapping, Mapping[str, Any]], str]
    # pipeline.init: (the settings it writes, why), or LabelMismatch; `how`: inferred or --task.
    fit_label: Callable[[LabelSample, str], Tuple[Dict[str, Any], str]]
    # pipeline.init: thresholds a model must reach to beat a trivial one on this label.
    init_thresholds: Callable[[LabelSample], Dict[str, dict]]
    # Keys of the config's `task:` section this kind takes: name -> (annotation, pydantic
    # default or Field); None (unset) for every other kind.
    settings: Mapping[str, Tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    # Settings that must be set, with what to write.
    required: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The value in force when a setting is unset.
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _significant(value: float, digits: int = 4) -> float:
    return float(f"{value:.{digits}g}")


# -- multiclass: one of the label's values (text), softmax over them -----------------------------

def accuracy_floor(label: LabelSample) -> float:
    """The share of the most frequent class, rounded up to 0.01: what always answering that
    class scores, which a blessed model must reach."""
    return math.ceil(100 * max(label.counts.values()) / sum(label.counts.values())) / 100


def _fits_classes(label: LabelSample, how: str) -> Tuple[Dict[str, Any], str]:
    if len(label.counts) > MAX_CLASSES:
        raise LabelMismatch(
            f"the label '{label.name}' has {len(label.counts)} distinct values, too many "
            f"classes (at most {MAX_CLASSES}); "
            + ("use --task regression to predict the number" if label.numeric
               else "bucket the values into classes first"))
    return {}, f"{how}: {len(label.counts)} classes"


MULTICLASS = Task(
    kind="multiclass", label="text", head="SoftmaxHead",
    outputs=("class_name", "probabilities"), loss="SparseCategoricalCrossentropy",
    default_metrics=("SparseCategoricalAccuracy",),
    threshold_metrics=("SparseCategoricalAccuracy", "SparseTopKCategoricalAccuracy",
                       "SparseCategoricalCrossentropy", "ExampleCount"),
    answer=lambda p, settings: f"{p['class_name']} {max(p['probabilities']):.3f}",
    fit_label=_fits_classes,
    init_thresholds=lambda label: {"SparseCategoricalAccuracy": {
        "lower_bound": accuracy_floor(label), "max_decrease": 0.01}})


# -- binary: whether the label is task.positive_class, the positive class's probability ----------

def _text(value):
    if value is not None and not isinstance(value, str):
        # YAML reads 1, yes and true unquoted as a number or a boolean.
        raise ValueError(f"{value!r} is not text: quote the label value, e.g. "
                         "positive_class: \"1\" or positive_class: \"yes\"")
    return value


def _fits_two_values(label: LabelSample, how: str) -> Tuple[Dict[str, Any], str]:
    classes = label.counts
    if len(classes) != 2:
        raise LabelMismatch(f"--task binary needs a label with two values; '{label.name}' has "
                            f"{len(classes)}; use --task multiclass"
                            + (" or regression" if label.numeric else ""))
    yes = [v for v in classes if v.strip().lower() in POSITIVE_WORDS]
    if len(yes) == 1:
        positive, rule = yes[0], "the value that reads as yes"
    else:
        positive = min(sorted(classes, reverse=True), key=lambda v: classes[v])
        rule = "the less frequent value"
    return ({"positive_class": positive, "decision_threshold": 0.5},
            f"{how}: two label values; positive class '{positive}' is {rule} (set "
            "task.positive_class to change it)")


BINARY = Task(
    kind="binary", label="text", head="SigmoidHead",
    outputs=("class_name", "probability"), loss="BinaryCrossentropy",
    default_metrics=("AUC", "Precision", "Recall", "BinaryAccuracy"),
    threshold_metrics=("AUC", "Precision", "Recall", "BinaryAccuracy", "BinaryCrossentropy",
                       "TruePositives", "FalsePositives", "TrueNegatives", "FalseNegatives",
                       "ExampleCount"),
    answer=lambda p, settings: (f"{p['class_name']} p({settings['positive_class']})="
                                f"{float(p['probability']):.3f}"),
    fit_label=_fits_two_values,
    init_thresholds=lambda label: {"AUC": {"lower_bound": BINARY_AUC_FLOOR,
                                           "max_decrease": 0.02}},
    settings={
        # The label value that is positive, as text.
        "positive_class": (Annotated[Optional[str], BeforeValidator(_text)], None),
        # The positive class is answered when its probability is at least this; also the
        # threshold of the default Precision, Recall and BinaryAccuracy.
        "decision_threshold": (Optional[float], Field(None, gt=0.0, lt=1.0)),
    },
    required={"positive_class": "the label value that is positive, e.g. "
                                "positive_class: \"yes\""},
    defaults={"decision_threshold": 0.5})


# -- regression: the label's number, in its units -------------------------------------------------

def median_deviation(label: LabelSample) -> float:
    """The mean absolute deviation of the label from its median: the mean absolute error of
    always answering the median, which a blessed regression model must beat."""
    values = [float(v) for v, n in label.counts.items() for _ in range(n)]
    middle = statistics.median(values)
    return sum(abs(v - middle) for v in values) / len(values)


def _fits_a_number(label: LabelSample, how: str) -> Tuple[Dict[str, Any], str]:
    if not label.numeric:
        text = next(v for v in label.counts if number_problem(v)[1] is not None)
        raise LabelMismatch(f"--task regression needs a numeric label, but '{label.name}' "
                            f"holds {number_problem(text)[1]}")
    return {}, f"{how}: a numeric label with {len(label.counts)} distinct values"


def _beat_the_median(label: LabelSample) -> Dict[str, dict]:
    deviation = median_deviation(label)
    return {"MeanAbsoluteError": {"upper_bound": _significant(deviation),
                                  "max_increase": _significant(0.05 * deviation, 2)}}


REGRESSION = Task(
    kind="regression", label="number", head="ScaledValueHead",
    outputs=("value",), loss="MeanSquaredError",
    default_metrics=("MeanAbsoluteError", "RootMeanSquaredError"),
    threshold_metrics=("MeanAbsoluteError", "RootMeanSquaredError", "MeanSquaredError",
                       "MeanAbsolutePercentageError", "MeanSquaredLogarithmicError",
                       "SquaredPearsonCorrelation", "ExampleCount"),
    answer=lambda p, settings: f"{float(p['value']):.6g}",
    fit_label=_fits_a_number, init_thresholds=_beat_the_median)


# -- the registry ---------------------------------------------------------------------------------

# In the order the config's error messages and `--task` list them; the first is the default.
TASKS: Dict[str, Task] = {t.kind: t for t in (MULTICLASS, BINARY, REGRESSION)}
KINDS = tuple(TASKS)
DEFAULT_KIND = KINDS[0]


def _all_settings() -> Dict[str, Tuple[Any, Any]]:
    found: Dict[str, Tuple[Any, Any]] = {}
    for task in TASKS.values():
        for name, declared in task.settings.items():
            if found.setdefault(name, declared) is not declared:
                raise TypeError(f"task setting {name} is declared twice: declare it once and "
                                "share the declaration")
    return found


# Every kind's settings: the keys the config's `task:` section may hold besides `kind`.
SETTINGS = _all_settings()


def infer_kind(label: LabelSample) -> str:
    """pipeline.init's kind for a label: a numeric label with more than MAX_NUMERIC_CLASSES
    distinct values, or with fractions, is a regression; one with two values is binary; any
    other is multiclass."""
    many = label.numeric and (len(label.counts) > MAX_NUMERIC_CLASSES or not all(
        float(v).is_integer() for v in label.counts))
    return REGRESSION.kind if many else BINARY.kind if len(label.counts) == 2 \
        else MULTICLASS.kind


def task_and_settings(section: Optional[Mapping]) -> Tuple[Task, Dict[str, Any]]:
    """The Task of a `task:` section (the config's, or the dict components get in their
    custom_config) and its kind's settings, the defaults in force where unset."""
    section = section or {}
    task = TASKS[section.get("kind") or DEFAULT_KIND]
    settings = {}
    for name in task.settings:
        value = section.get(name)
        settings[name] = task.defaults.get(name) if value is None else value
    return task, settings
