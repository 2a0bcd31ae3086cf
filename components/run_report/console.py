"""The summary a local run prints when it ends: RunFacts as a few lines of text."""
from __future__ import annotations

from typing import List, Sequence

from components.run_report import words
from components.run_report.facts import RunFacts
from core import nodes
from core.config import BASELINE, CANDIDATE


def summary(facts: RunFacts, pictures: Sequence[str] = ()) -> str:
    lines = [f"Summary of run {facts.run_id}",
             f"  ran:        {', '.join(facts.ran) or '-'}",
             f"  from cache: {', '.join(facts.cached) or '-'}"]
    if nodes.EXAMPLE_GEN in facts.cached:  # its cache key holds the newest span's fingerprint
        lines.append("  data:       no new span since the last run")
    if facts.metrics:
        baseline = "baseline" + (f" v{facts.baseline_version}" if facts.baseline_version
                                 else "")
        lines.append(f"  {'metric (all eval data)':32} {'candidate':>10} {baseline:>18}")
        for name, values in sorted(facts.metrics.items()):
            base = values.get(BASELINE)
            lines.append(f"  {name:32} {values.get(CANDIDATE, float('nan')):>10.4f} "
                         f"{'-' if base is None else f'{base:.4f}':>18}")
    if facts.retrieval is not None:
        lines.append(f"  retrieval:  {words.retrieval(facts.retrieval)}")
    if words.skew(facts):
        lines.append(f"  skew:       {words.skew(facts)}")
    lines += _baseline(facts)
    blessed = "-" if facts.blessed is None else "yes" if facts.blessed else "no"
    lines.append(f"  blessed:    {blessed}")
    lines += [f"    - {words.refusal(r)}" for r in facts.refusals]
    lines.append(_pushed(facts))
    if words.release(facts):
        cached = " (from the cache)" if nodes.RELEASE in facts.cached else ""
        lines.append(f"  release:    {words.release(facts)}{cached}")
    lines += [f"  picture:    {picture}" for picture in pictures]
    return "\n".join(lines)


def _baseline(facts: RunFacts) -> List[str]:
    if facts.baseline_version is not None or facts.blessed is None:
        return []
    if facts.serving_now is None or nodes.SERVING_BASELINE in facts.ran:
        return ["  baseline:   none serving yet; absolute thresholds only"]
    # An evaluation reused from the cache, made before anything served.
    return ["  baseline:   none when this model was evaluated (absolute thresholds only; reused "
            f"from the cache); v{facts.serving_now} serves now"]


def _pushed(facts: RunFacts) -> str:
    if facts.pushed_to and nodes.PUSHER in facts.ran:
        return f"  pushed:     {facts.pushed_to}"
    if facts.pushed_to:
        return (f"  pushed:     nothing new (unchanged inputs; serving {facts.pushed_to} from an "
                "earlier run)")
    if facts.blessed is False:
        return "  pushed:     nothing: the model was not blessed; serving is untouched"
    return "  pushed:     nothing"
