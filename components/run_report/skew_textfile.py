"""The skew check's figures as a Prometheus text file, for node_exporter's textfile collector
(its --collector.textfile.directory reads every *.prom file there at each scrape; Debian's
prometheus-node-exporter package sets it to /var/lib/prometheus/node-exporter).

The report writes it next to itself and, when the config names the collector's directory
(skew.prometheus_textfile_dir), there too, atomically (prometheus_client writes a temporary file
and renames it), so that a scrape never reads half a file. A run without a skew result, or whose
check compared nothing, writes none: the last file stays, and ServingSkewCheckStale
(deploy/serving/prometheus/pipeline-alerts.yml, which reads these names) fires when its
timestamp grows old.
"""
from __future__ import annotations

import os
import time
from typing import Optional

from prometheus_client import CollectorRegistry, Gauge, generate_latest, write_to_textfile

from core import storage
from components.run_report.facts import RunFacts, skew_compared, skew_ratio

# Next to the report; in the collector's directory one file per pipeline.
TEXTFILE = "serving_skew.prom"
RATIO = "tfx_serving_skew_ratio"
FEATURES_SKEWED = "tfx_serving_skew_features_skewed"
MISSING_FEATURES = "tfx_serving_skew_missing_features"
UNSEEN_VALUES = "tfx_serving_skew_unseen_values"
LAST_CHECK = "tfx_serving_skew_last_check_timestamp_seconds"
NAMES = (RATIO, FEATURES_SKEWED, MISSING_FEATURES, UNSEEN_VALUES, LAST_CHECK)


def registry(facts: RunFacts, now: Optional[float] = None) -> CollectorRegistry:
    """The figures of facts.skew (skew_compared must hold); the check's time is when its
    artifact was recorded, else `now` (default: the clock)."""
    skew, pipeline = facts.skew, facts.pipeline
    found = CollectorRegistry()
    ratio = Gauge(RATIO, "The serving span's skew distance over its threshold, per feature "
                  "(above 1: skewed)", ["pipeline", "feature", "measure"], registry=found)
    for feature in skew["features"]:
        if skew_ratio(feature) is not None:  # TFDV measured it
            ratio.labels(pipeline, feature["feature"], feature["measure"]).set(
                skew_ratio(feature))
    Gauge(FEATURES_SKEWED, "Features whose skew is beyond the threshold", ["pipeline"],
          registry=found).labels(pipeline).set(sum(f["skewed"] for f in skew["features"]))
    Gauge(MISSING_FEATURES, "Features present in training and missing at serving",
          ["pipeline"], registry=found).labels(pipeline).set(len(skew["missing"]))
    unseen = Gauge(UNSEEN_VALUES, "Values at serving that training never had, per feature",
                   ["pipeline", "feature"], registry=found)
    for feature in skew["unseen"]:
        unseen.labels(pipeline, feature["feature"]).set(feature["count"])
    checked_at = skew.get("checked_at") or (time.time() if now is None else now)
    Gauge(LAST_CHECK, "When the skew check measured these figures", ["pipeline"],
          registry=found).labels(pipeline).set(checked_at)
    return found


def text(facts: RunFacts, now: Optional[float] = None) -> str:
    return generate_latest(registry(facts, now)).decode()


def write(facts: RunFacts, folder: str, name: str = TEXTFILE,
          now: Optional[float] = None) -> Optional[str]:
    """Writes the file in a local folder (atomically); returns its path, None when there is
    nothing to write."""
    if not skew_compared(facts.skew):
        return None
    # A local folder always (write_to_textfile renames a temporary file); through
    # storage.makedirs like every step's folder (tests/test_storage.py).
    storage.makedirs(folder, lambda path: os.makedirs(path, exist_ok=True))
    path = os.path.join(folder, name)
    write_to_textfile(path, registry(facts, now))
    return path


def collector_name(pipeline: str) -> str:
    """The file's name in the collector's directory, which several pipelines may share."""
    return f"serving_skew_{pipeline}.prom"


def configured_dir(config) -> Optional[str]:
    """skew.prometheus_textfile_dir: node_exporter's textfile collector directory, or None."""
    return config.skew.prometheus_textfile_dir


def export(facts: RunFacts, report_dir: str, config) -> list:
    """The file next to the report and in the configured collector directory, the same
    figures in both; the paths written."""
    now = time.time()
    paths = [write(facts, report_dir, now=now)]
    if configured_dir(config):
        paths.append(write(facts, str(configured_dir(config)), collector_name(facts.pipeline),
                           now))
    return [path for path in paths if path]
