"""What one run did, as one typed object: reader.py fills it from ML Metadata and the run's
artifacts; the console summary, the HTML and Markdown report and the KFP UI's metrics render it.

Every step may be missing (a run stopped by a gate has no model): its fields are None or empty
then, and each renderer says why.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple, Union

# slice name ("all" overall) -> metric -> model ("candidate" or "baseline") -> value
MetricsBySlice = Dict[str, Dict[str, Dict[str, float]]]


@dataclasses.dataclass
class ValuesPerExample:
    """How many values a list feature holds per example where it is present (TFDV's
    common_stats: an empty list counts, with 0)."""
    min: int
    mean: float
    max: int
    # The num_values histogram's quantile edges (0%, 10%, ... 100%) when TFDV made one.
    quantiles: List[float] = dataclasses.field(default_factory=list)

    def quantile(self, share: float) -> Optional[float]:
        """The value count at `share` of the examples (0.5: the median), from the edges."""
        if len(self.quantiles) < 2:
            return None
        return self.quantiles[round(share * (len(self.quantiles) - 1))]


@dataclasses.dataclass
class FeatureSplit:
    count: int
    missing: int
    kind: str  # "numeric" or "categorical" (a list feature: its element's)
    # numeric: (low, high, count) buckets; categorical: (value, count), most frequent first (a
    # list feature's: over its values, not its examples).
    buckets: List[Tuple] = dataclasses.field(default_factory=list)
    mean: Optional[float] = None
    values: Optional[ValuesPerExample] = None  # list features only (features.lists)

    @property
    def presence(self) -> float:
        return 1.0 - self.missing / self.count if self.count else 0.0


@dataclasses.dataclass
class Refusal:
    """One threshold TFMA's validation failed, as numbers (words.refusal says it)."""
    metric: str
    slice: str
    is_diff: bool  # a change against the baseline, not the value itself
    value: Optional[float]  # None: TFMA did not compute the metric
    lower_bound: Optional[float] = None
    upper_bound: Optional[float] = None
    higher_is_better: Optional[bool] = None  # a change threshold's direction
    absolute: Optional[float] = None
    relative: Optional[float] = None


@dataclasses.dataclass
class ThresholdRow:
    """A configured bound, the value it judged and its verdict (None: not evaluated)."""
    metric: str
    rule: str
    value: Optional[float]
    passed: Union[bool, str, None]  # a str says why it was not judged ("no baseline")


@dataclasses.dataclass
class Anomaly:
    split: str
    feature: str
    kind: str  # TFDV's AnomalyInfo.Type name
    description: str
    advice: str


@dataclasses.dataclass
class SpanRead:
    span: str
    files: List[Tuple[str, int]]  # (path, rows)


@dataclasses.dataclass
class HistoryRun:
    run_id: str
    metric: Optional[float]  # the key metric, candidate, overall
    blessed: Optional[bool]
    rows: Dict[str, int] = dataclasses.field(default_factory=dict)  # split -> examples


@dataclasses.dataclass
class Retrieval:
    """How well `retrieve` found the clicked items of the eval split, as the Trainer measured it
    (components/trainer/retrieval_quality.py): the clicked item among the k retrieved ones."""
    k: int
    clicked_examples: int  # eval examples of the positive class, each one query
    items: int  # candidates scored (the candidate vocabulary)
    hit_rate: float
    popular_hit_rate: float  # the same for the k most frequent items, served to everyone


def skew_ratio(feature: dict) -> Optional[float]:
    """A feature's skew distance over its threshold: above 1 is skewed; None: not measured
    (TFDV gave no distance)."""
    if feature["distance"] is None:
        return None
    if feature["threshold"] > 0:
        return feature["distance"] / feature["threshold"]
    return math.inf if feature["distance"] > 0 else 0.0


def skew_compared(skew: Optional[dict]) -> bool:
    """Whether a skew result compared anything (else its note says why not)."""
    return bool(skew and (skew["features"] or skew["missing"] or skew["unseen"]))


def worst_first(features: List[dict]) -> List[dict]:
    """The skew check's features, the furthest beyond (or nearest to) its threshold first, the
    unmeasured last."""
    return sorted(features, key=lambda f: -math.inf if skew_ratio(f) is None else skew_ratio(f),
                  reverse=True)


@dataclasses.dataclass
class RunFacts:
    pipeline: str
    run_id: str
    key_metric: str  # the first threshold's metric, as TFMA names its values
    config_hash: str = ""
    fingerprints: Dict[str, str] = dataclasses.field(default_factory=dict)
    error: Optional[str] = None  # why the run stopped, if it did
    failed_steps: List[str] = dataclasses.field(default_factory=list)
    # What the local runner saw (its progress log); empty on Kubeflow.
    ran: List[str] = dataclasses.field(default_factory=list)
    cached: List[str] = dataclasses.field(default_factory=list)
    spans: List[SpanRead] = dataclasses.field(default_factory=list)
    features: Dict[str, Dict[str, FeatureSplit]] = dataclasses.field(default_factory=dict)
    anomalies: Optional[List[Anomaly]] = None  # None: not checked
    drift: Optional[dict] = None  # components/drift_gate's record, plus "action"
    # components/skew_gate's record (skew.json), plus "action" (skew.on_skew) and "checked_at"
    # (seconds since the epoch when its artifact was recorded; None: not known, as on Kubeflow).
    skew: Optional[dict] = None
    by_slice: MetricsBySlice = dataclasses.field(default_factory=dict)
    baseline_version: Optional[str] = None  # what served when the candidate was evaluated
    thresholds: List[ThresholdRow] = dataclasses.field(default_factory=list)
    blessed: Optional[bool] = None  # None: not evaluated
    refusals: List[Refusal] = dataclasses.field(default_factory=list)
    pushed_to: Optional[str] = None
    # serving.release: canary: the release step's status (components/release/executor.py's
    # properties: action, version, message, ...); None: no release step (direct) or it did not run.
    release: Optional[Dict[str, str]] = None
    training: Dict[str, List[float]] = dataclasses.field(default_factory=dict)
    retrieval: Optional[Retrieval] = None  # None: no retrieval measured (not a recommender)
    history: Optional[List[HistoryRun]] = None  # None: not read (Kubeflow)
    serving_now: Optional[str] = None  # the version serving when the run ended (local)

    @property
    def metrics(self) -> Dict[str, Dict[str, float]]:
        """Overall: metric -> model -> value."""
        return self.by_slice.get("all", {})
