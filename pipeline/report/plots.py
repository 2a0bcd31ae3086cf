"""Pictures of a run: the data's distributions per split, and the evaluation per slice.

Offline PNGs (TFDV's and TFMA's HTML views load their code from the internet).
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Dict, List, Optional

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def plot_statistics(statistics_uri: str, splits: List[str], output: Path) -> Path:
    """One panel per feature: histogram (numeric) or top values (text), one series per split."""
    from tensorflow_data_validation.utils import stats_util

    per_split = {}
    for split in splits:
        stats = stats_util.load_stats_binary(
            os.path.join(statistics_uri, f"Split-{split}", "FeatureStats.pb"))
        per_split[split] = {f.path.step[0]: f for f in stats.datasets[0].features}
    names = sorted(next(iter(per_split.values())))
    columns = 3
    figure, axes = plt.subplots(math.ceil(len(names) / columns), columns,
                                figsize=(4 * columns, 3 * math.ceil(len(names) / columns)),
                                squeeze=False)
    for axis, name in zip(axes.flat, names, strict=False):
        missing = []
        for index, (split, features) in enumerate(per_split.items()):
            feature = features.get(name)
            if feature is None:
                continue
            if feature.HasField("num_stats"):
                histogram = next((h for h in feature.num_stats.histograms if h.type == 0), None)
                if histogram is not None:
                    total = sum(b.sample_count for b in histogram.buckets) or 1
                    axis.step([b.low_value for b in histogram.buckets],
                              [b.sample_count / total for b in histogram.buckets], where="post",
                              label=split)
                common = feature.num_stats.common_stats
            else:
                frequencies = {v.value: v.frequency for v in feature.string_stats.top_values}
                values = sorted({v.value for f in per_split.values() if name in f
                                 for v in f[name].string_stats.top_values})
                total = sum(frequencies.values()) or 1
                width = 0.8 / len(per_split)
                axis.bar([i + index * width for i in range(len(values))],
                         [frequencies.get(v, 0) / total for v in values], width, label=split)
                axis.set_xticks([i + 0.4 - width / 2 for i in range(len(values))], values,
                                fontsize=7)
                common = feature.string_stats.common_stats
            missing.append(f"{split} {int(common.num_missing)}")
        axis.set_title(f"{name} (missing: {', '.join(missing)})", fontsize=9)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(names):]:
        axis.axis("off")
    figure.suptitle("Data distributions by split (share of examples)")
    figure.tight_layout()
    figure.savefig(output, dpi=80)
    plt.close(figure)
    return output


def plot_evaluation(metrics_by_slice: Dict[str, Dict[str, Dict[str, float]]], metric: str,
                    output: Path, baseline_version: Optional[str]) -> Path:
    """Bars per slice, candidate beside baseline, for one metric."""
    slices = sorted(metrics_by_slice, key=lambda s: (s != "all", s))
    figure, axis = plt.subplots(figsize=(max(6, 1.2 * len(slices)), 4))
    width = 0.4
    for offset, model in ((-width / 2, "candidate"), (width / 2, "baseline")):
        values = [metrics_by_slice[s].get(metric, {}).get(model, math.nan) for s in slices]
        if all(math.isnan(v) for v in values):
            continue
        label = model if model == "candidate" else f"baseline (serving v{baseline_version})"
        axis.bar([i + offset for i in range(len(slices))], values, width, label=label)
    axis.set_xticks(range(len(slices)), slices, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel(metric)
    axis.set_title(f"{metric} on the eval split, by slice")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(output, dpi=80)
    plt.close(figure)
    return output


def metrics_by_slice(evaluation_uri: str) -> Dict[str, Dict[str, Dict[str, float]]]:
    """slice name -> metric -> model -> value (model 'candidate' or 'baseline')."""
    import tensorflow_model_analysis as tfma

    result: Dict[str, Dict[str, Dict[str, float]]] = {}
    for per_slice in tfma.load_metrics(evaluation_uri):
        keys = per_slice.slice_key.single_slice_keys
        name = ", ".join(f"{k.column}={k.bytes_value.decode() or k.int64_value or k.float_value}"
                         for k in keys) or "all"
        for entry in per_slice.metric_keys_and_values:
            if entry.key.is_diff or not entry.value.HasField("double_value"):
                continue
            result.setdefault(name, {}).setdefault(entry.key.name, {})[
                entry.key.model_name or "candidate"] = entry.value.double_value.value
    return result
