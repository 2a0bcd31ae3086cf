"""What a run decided, in words: each refused threshold and the blessing decision, said once for
every renderer (the console summary, the HTML and Markdown report)."""
from __future__ import annotations

from typing import Optional

from components.run_report.facts import (Refusal, Retrieval, RunFacts, ValuesPerExample,
                                         skew_compared, worst_first)


def refusal(failed: Refusal) -> str:
    """'auc on Overall = 0.5178, below the lower bound 0.7'; 'auc (change vs baseline) on
    Overall = -0.1500, a decrease over the allowed 0.1'. TFMA's rules are those of
    evaluators/metrics_validator.py _check_threshold (TFMA 0.47)."""
    name = (f"{failed.metric}{' (change vs baseline)' if failed.is_diff else ''}"
            f" on {failed.slice}")
    if failed.value is None:
        return f"{name}: not computed, so no bound can hold"
    value = failed.value
    reasons = []
    if failed.lower_bound is not None and value < failed.lower_bound:
        reasons.append(f"below the lower bound {failed.lower_bound:g}")
    if failed.upper_bound is not None and value > failed.upper_bound:
        reasons.append(f"above the upper bound {failed.upper_bound:g}")
    if failed.absolute is not None and failed.higher_is_better is not None:
        # HIGHER_IS_BETTER passes when the change >= absolute, LOWER_IS_BETTER when <= absolute.
        bound = failed.absolute
        if failed.higher_is_better and value < bound:
            reasons.append(f"a decrease over the allowed {-bound:g}" if bound <= 0 else
                           f"less than the required increase {bound:g}")
        elif not failed.higher_is_better and value > bound:
            reasons.append(f"an increase over the allowed {bound:g}" if bound >= 0 else
                           f"less than the required decrease {-bound:g}")
    if failed.relative is not None and not reasons:  # the ratio to the baseline decided
        direction = "at least" if failed.higher_is_better else "at most"
        reasons.append(f"outside the allowed relative change ({direction} {failed.relative:+g}"
                       " of the baseline)")
    return f"{name} = {value:.4f}, " + " and ".join(reasons or ["outside its bound"])


def decision(facts: RunFacts) -> str:
    """The blessing decision, and what was pushed, in one sentence."""
    if facts.blessed is None:
        where = ", ".join(facts.failed_steps) or "an earlier step"
        return (f"Not evaluated: the run stopped at {where}; nothing was "
                "pushed and the serving model is untouched.")
    if facts.blessed is False:
        serving = (f"version {facts.baseline_version} keeps serving"
                   if facts.baseline_version else "serving is untouched")
        return (f"Not blessed: {len(facts.refusals)} threshold(s) failed "
                f"({'; '.join(refusal(r) for r in facts.refusals)}); nothing was pushed and "
                f"{serving}.")
    if facts.pushed_to:
        return (f"Blessed: every threshold held, and the model serves as {facts.pushed_to}"
                + (f" (it replaced version {facts.baseline_version})."
                   if facts.baseline_version else " (the first model to serve)."))
    return "Blessed, but nothing new was pushed (the pusher did not run or reused its cache)."


def release(facts: RunFacts) -> Optional[str]:
    """The release step's status in a line (serving.release: canary); None without one."""
    status = facts.release
    if not status:
        return None
    action = status.get("action") or "?"
    message = status.get("message") or f"{action}, version {status.get('version')}"
    return f"NOT released: {message}" if action in ("aborted", "in-progress") else message


def retrieval(measured: Retrieval) -> str:
    """'hit rate at 10 0.111 over 5114 clicked eval examples (the 10 most popular items:
    0.034)': how often `retrieve` put the clicked item among its k, beside a popularity list."""
    k = measured.k
    if not measured.clicked_examples:
        return f"hit rate at {k}: not measured (no clicked example in the eval split)"
    return (f"hit rate at {k} {measured.hit_rate:.3f} over {measured.clicked_examples} clicked "
            f"eval examples (the {k} most popular items: {measured.popular_hit_rate:.3f})")


def values_per_example(values: ValuesPerExample) -> str:
    """'0 / 9.22 / 12 (median 10, 10%-90%: 6-10)': a list feature's values per example,
    min / mean / max, and the quantiles when TFDV gave them."""
    text = f"{values.min} / {values.mean:.2f} / {values.max}"
    median = values.quantile(0.5)
    if median is None:
        return text
    low, high = values.quantile(0.1), values.quantile(0.9)
    return f"{text} (median {median:g}, 10%-90%: {low:g}-{high:g})"


def skew_spans(found: dict) -> str:
    """'serving span 20261203 (812 rows) against training span 20261202 (5000 rows)'."""
    rows = found["rows"]
    spans = ", ".join(found["training_spans"]) or "-"
    return (f"serving span {found['serving_span'] or '-'} ({rows['serving']} rows) "
            f"against training span{'s' if len(found['training_spans']) > 1 else ''} {spans} "
            f"({rows['training']} rows)")


def skew(facts: RunFacts) -> Optional[str]:
    """The skew check in a line: what it compared, the features beyond their threshold (worst
    first), missing at serving, with values training never had; None without a check."""
    found = facts.skew
    if found is None:
        return None
    if not skew_compared(found):
        return f"not compared: {found['note'] or 'no serving data'}"
    skewed = [f for f in worst_first(found["features"]) if f["skewed"]]
    parts = [f"{len(skewed)} feature(s) beyond the threshold: " + ", ".join(
        f"{f['feature']} ({f['measure']} {f['distance']:.3f} > {f['threshold']:g})"
        if f["distance"] is not None else f"{f['feature']} ({f['measure']})"
        for f in skewed)] if skewed else []
    if found["missing"]:
        parts.append("missing at serving: " + ", ".join(m["feature"] for m in found["missing"]))
    if found["unseen"]:
        parts.append("values training never had: " + ", ".join(
            f"{u['feature']} ({u['count']} rows)" for u in found["unseen"]))
    action = (f" (on skew: {found['action']})" if found["skewed"]
              else "")
    return (f"{skew_spans(found)}: "
            + ("; ".join(parts) if parts else "no feature beyond its threshold") + action)
