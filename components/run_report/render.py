"""RunFacts as the run report: one self-contained HTML page (inline CSS and SVG charts, no
script, nothing from the network) and a short Markdown version."""
from __future__ import annotations

import math
from html import escape
from typing import List, Optional

from components.run_report import charts, words
from components.run_report.facts import RunFacts, skew_compared, skew_ratio, worst_first

SECTIONS = ("identity", "data", "drift", "skew", "evaluation", "training", "history")
TITLES = {"skew": "Serving skew"}  # the others: the id, capitalized
STYLE = """
body{font-family:sans-serif;margin:1.5em auto;max-width:1100px;color:#222;line-height:1.35}
h1{font-size:1.4em}h2{border-bottom:2px solid #ddd;padding-bottom:2px;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.pass{color:#0a7a2f;font-weight:bold}.fail{color:#b00020;font-weight:bold}
.warn{background:#fff4d6;padding:.5em;border-left:4px solid #e69f00}
.bad{background:#fde7ea;padding:.5em;border-left:4px solid #b00020}
.ok{background:#e6f4ea;padding:.5em;border-left:4px solid #0a7a2f}
.charts{display:flex;flex-wrap:wrap;gap:8px}.muted{color:#666}code{font-size:.9em}
"""


def _number(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _verdict(passed) -> str:
    if passed is None:
        return '<span class="muted">not evaluated</span>'
    if isinstance(passed, str):
        return f'<span class="muted">{escape(passed)}</span>'
    return '<span class="pass">pass</span>' if passed else '<span class="fail">FAIL</span>'


def _table(header: List[str], rows: List[List[str]]) -> str:
    """Cells are HTML already (escape text before)."""
    return ("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
            + "</table>")



def _identity(r: RunFacts) -> str:
    rows = [["pipeline", escape(r.pipeline)], ["run id", f"<code>{escape(r.run_id)}</code>"],
            ["config hash", f"<code>{r.config_hash}</code>"]]
    rows += [[f"fingerprint: {escape(name)}", f"<code>{value}</code>"]
             for name, value in r.fingerprints.items()]
    files = "".join(f"<li>span {escape(s.span)}: <code>{escape(path)}</code> ({count} rows)</li>"
                    for s in r.spans for path, count in s.files)
    rows.append(["spans and files read", f"<ul>{files}</ul>" if files else "none recorded"])
    outcome = "ok" if r.pushed_to else "bad" if r.blessed is not True else "warn"
    body = _table(["what", "value"], rows)
    if r.error:
        body += f'<p class="bad"><b>The run stopped:</b> <code>{escape(r.error)}</code></p>'
    body += f'<p class="{outcome}" id="decision">{escape(words.decision(r))}</p>'
    if words.release(r):
        released = "ok" if (r.release or {}).get("action") in ("released", "unchanged") else "warn"
        body += (f'<p class="{released}" id="release"><b>Release:</b> '
                 f'{escape(words.release(r))}</p>')
    return body


def _data(r: RunFacts) -> str:
    if not r.features:
        return '<p class="muted">No statistics: the run stopped before StatisticsGen.</p>'
    rows = []
    figures = []
    # A column for list features' values per example, when the data has any.
    lists = any(entry.values for per_split in r.features.values()
                for entry in per_split.values())
    for name, per_split in sorted(r.features.items()):
        for split, entry in per_split.items():
            kind = f"{entry.kind} list" if entry.values else entry.kind
            row = [escape(name), escape(split), kind, str(entry.count),
                   f"{entry.presence:.1%}", str(entry.missing),
                   _number(entry.mean, 2) if entry.mean is not None else
                   escape(", ".join(f"{v} ({c:g})" for v, c in entry.buckets[:4]))]
            if lists:
                row.append(escape(words.values_per_example(entry.values)) if entry.values
                           else "-")
            rows.append(row)
        shows, draw = charts.feature(per_split)
        figures.append(f"<figure>{charts.svg(f'{name}: {shows}', draw)}<figcaption>"
                       f"{escape(name)}</figcaption></figure>")
    body = _table(["feature", "split", "kind", "examples", "presence", "missing",
                   "mean / top values"]
                  + (["values per example (min / mean / max)"] if lists else []), rows)
    body += f'<div class="charts">{"".join(figures)}</div>'
    if r.anomalies is None:
        body += '<p class="muted">Anomalies: not checked (the run stopped earlier).</p>'
    elif not r.anomalies:
        body += '<p class="ok">Anomalies: none; every split matches the schema.</p>'
    else:
        body += '<h3>Anomalies</h3>' + _table(
            ["split", "feature", "anomaly", "what TFDV saw", "what to do"],
            [[escape(a.split), escape(a.feature), escape(a.kind), escape(a.description),
              escape(a.advice)] for a in r.anomalies])
    return body


def _drift(r: RunFacts) -> str:
    drift = r.drift
    if drift is None:
        return '<p class="muted">Not measured: the run stopped before the drift check.</p>'
    if not drift["features"]:
        return f'<p class="muted">{escape(drift["note"])}</p>'
    drifted = [f for f in drift["features"] if f["drifted"]]
    verdict = (f'<p class="{"bad" if drift["action"] == "stop" else "warn"}">'
               f'{len(drifted)} feature(s) drifted: '
               f'{escape(", ".join(f["feature"] for f in drifted))} (on drift: '
               f'{escape(drift["action"])}).</p>' if drifted else
               '<p class="ok">No feature drifted beyond its threshold.</p>')
    def table(features):
        return _table(["feature", "distance", "value", "threshold", "verdict"], [
            [escape(f["feature"]), escape(f["measure"]), _number(f["distance"]),
             _number(f["threshold"]), _verdict(not f["drifted"])] for f in features])

    body = (f"<p>Span {escape(drift['newest_span'])} against span "
            f"{escape(drift['previous_span'])}.</p>" + verdict + table(drift["features"]))
    window = drift.get("window")
    if window:
        moved = [f["feature"] for f in window["features"] if f["drifted"]]
        body += (f"<h3>Against the training window</h3><p>Span {escape(drift['newest_span'])} "
                 f"against spans {escape(', '.join(window['spans']))} together (reported, not "
                 "a gate): " + (f'<span class="warn">{escape(", ".join(moved))} beyond the '
                                "threshold</span>" if moved else "within every threshold")
                 + ".</p>" + table(window["features"]))
    return body


def _skew(r: RunFacts) -> str:
    """The serving span against the training spans: each feature's distance and threshold,
    the worst first; features missing at serving; values training never had."""
    skew = r.skew
    if skew is None:
        return ('<p class="muted">Not measured: no skew check result (the pipeline has no '
                "SkewCheck, or the run stopped before it).</p>")
    note = f'<p class="muted">{escape(skew["note"])}</p>' if skew.get("note") else ""
    if not skew_compared(skew):
        return note or '<p class="muted">Nothing compared: no serving data.</p>'
    said = escape(words.skew(r))
    verdict = (f'<p class="{"bad" if skew.get("action") == "stop" else "warn"}">{said}.</p>'
               if skew["skewed"] else f'<p class="ok">{said}.</p>')
    body = verdict + note + _table(
        ["feature", "distance", "value", "threshold", "value / threshold", "verdict"],
        [[escape(f["feature"]), escape(f["measure"]), _number(f["distance"]),
          _number(f["threshold"]), _number(skew_ratio(f), 2),
          _verdict("not measured" if f["distance"] is None else not f["skewed"])]
         for f in worst_first(skew["features"])])
    if skew["missing"]:
        body += "<h3>Missing at serving</h3>" + _table(
            ["feature", "present in training", "present at serving"],
            [[escape(m["feature"]), f"{m['training_presence']:.1%}",
              f"{m['serving_presence']:.1%}"] for m in skew["missing"]])
    if skew["unseen"]:
        body += "<h3>Values training never had</h3>" + _table(
            ["feature", "rows", "values (up to 10)"],
            [[escape(u["feature"]), str(u["count"]), escape(", ".join(map(str, u["values"])))]
             for u in skew["unseen"]])
    return body


def _retrieval(r: RunFacts) -> str:
    """The Trainer's measure of `retrieve` on the eval split, beside a popularity list."""
    measured = r.retrieval
    if measured is None:
        return ""
    k = measured.k
    return ("<h3>Retrieval on the eval split</h3>"
            f"<p>{escape(words.retrieval(measured))}.</p>" + _table(
                ["measure", "value"],
                [[f"hit rate at {k} (the clicked item among the {k} retrieved)",
                  _number(measured.hit_rate)],
                 [f"the {k} most popular items, for everyone", _number(measured.popular_hit_rate)],
                 ["clicked eval examples (queries)", str(measured.clicked_examples)],
                 ["items scored (the candidate vocabulary)", str(measured.items)]]))


def _evaluation(r: RunFacts) -> str:
    by_slice = r.by_slice
    body = f'<p class="{"ok" if r.blessed else "bad"}">{escape(words.decision(r))}</p>'
    if r.thresholds:
        body += "<h3>Thresholds</h3>" + _table(
            ["metric", "rule", "value", "verdict"],
            [[escape(t.metric), escape(t.rule), _number(t.value), _verdict(t.passed)]
             for t in r.thresholds])
    body += _retrieval(r)
    if not by_slice:
        return body
    baseline = (f"serving v{r.baseline_version}" if r.baseline_version
                else "serving (none yet)")
    slices = sorted(by_slice, key=lambda s: (s != "all", s))
    metrics = sorted({m for s in slices for m in by_slice[s]})
    rows = [[escape(s), escape(m), _number(by_slice[s][m].get("candidate")),
             _number(by_slice[s][m].get("baseline"))] for s in slices for m in metrics
            if m in by_slice[s]]
    body += "<h3>Metrics overall and by slice</h3>" + _table(
        ["slice", "metric", "candidate", baseline], rows)
    title, draw = charts.evaluation(r)
    return body + charts.svg(title, draw, width=max(4.4, 0.95 * len(slices)), height=2.3)


def _training(r: RunFacts) -> str:
    history = r.training
    if not history:
        return '<p class="muted">No training record: the run stopped before the Trainer.</p>'
    epochs = max(len(v) for v in history.values())
    labels = [f"epoch {i + 1}" for i in range(epochs)]
    rows = [[str(i + 1)] + [_number(history[k][i] if i < len(history[k]) else None)
                            for k in sorted(history)] for i in range(epochs)]
    losses = {k: v for k, v in history.items() if "loss" in k}
    others = {k: v for k, v in history.items() if "loss" not in k}
    figures = "".join(charts.svg(title, charts.lines(labels, series), width=5, height=2.1)
                      for title, series in (("loss per epoch", losses),
                                            ("metrics per epoch", others)) if series)
    return _table(["epoch", *sorted(history)], rows) + f'<div class="charts">{figures}</div>'


def _history(r: RunFacts) -> str:
    runs = r.history
    if runs is None:
        return ('<p class="muted">Not in this report: the run history is read from the local '
                "ML Metadata store (on Kubeflow, compare the runs in the UI).</p>")
    if not runs:
        return '<p class="muted">No earlier run in ML Metadata.</p>'
    labels = [run.run_id for run in runs]
    metric = [math.nan if run.metric is None else run.metric for run in runs]
    splits = sorted({split for run in runs for split in run.rows})
    rows_series = {split: [float(run.rows.get(split, math.nan)) for run in runs]
                   for split in splits}
    rows = [[f"<code>{escape(run.run_id)}</code>", _number(run.metric)]
            + [str(run.rows.get(split, "-")) for split in splits]
            + [{True: "yes", False: "no", None: "-"}[run.blessed]] for run in runs]
    return (charts.svg(f"{r.key_metric} (candidate, overall) over the last {len(runs)} runs",
                       charts.lines(labels, {r.key_metric: metric}), width=5, height=2.1)
            + charts.svg(f"rows per split over the last {len(runs)} runs",
                         charts.lines(labels, rows_series), width=5, height=2.1)
            + _table(["run", r.key_metric, *[f"rows {split}" for split in splits], "blessed"],
                     rows))


RENDERERS = {"identity": _identity, "data": _data, "drift": _drift, "skew": _skew,
             "evaluation": _evaluation, "training": _training, "history": _history}


def html(r: RunFacts) -> str:
    sections = "".join(f'<section id="{name}"><h2>{TITLES.get(name, name.capitalize())}</h2>'
                       f"{RENDERERS[name](r)}</section>" for name in SECTIONS)
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(r.pipeline)} run {escape(r.run_id)}</title>"
            f"<style>{STYLE}</style></head><body>"
            f"<h1>Run report: {escape(r.pipeline)} <code>{escape(r.run_id)}</code></h1>"
            f"{sections}</body></html>\n")


# What can make markup in the middle of a line (data never starts one here, so list, heading
# and block markers cannot apply): code spans, emphasis, links and images (`[`), table cells,
# GFM strikethrough; backslash-escaped as CommonMark 2.4 allows. < > & become HTML entities.
_MARKDOWN_PUNCTUATION = set("\\`*[]|~")


def md_text(value) -> str:
    """Data-derived text (column names, file names, messages) as Markdown that renders it as
    text: no link, image, HTML tag, table cell or emphasis can come out of it. An underscore
    between letters or digits stays (it cannot open emphasis: CommonMark 6.2), so metric and
    column names read as they are."""
    text = escape(str(value), quote=False).replace("\r", " ").replace("\n", " ")
    out = []
    for i, c in enumerate(text):
        intraword = c == "_" and 0 < i < len(text) - 1 and text[i - 1].isalnum() \
            and text[i + 1].isalnum()
        out.append(f"\\{c}" if c in _MARKDOWN_PUNCTUATION or (c == "_" and not intraword)
                   else c)
    return "".join(out)


def md_code(value) -> str:
    """Inline code whose fence is longer than any backtick run inside (CommonMark 6.1)."""
    text = str(value).replace("\r", " ").replace("\n", " ")
    fence = "`" * (_longest_run(text, "`") + 1)
    return f"{fence} {text} {fence}" if text.startswith("`") or text.endswith("`") \
        else f"{fence}{text}{fence}"


def md_block(value) -> List[str]:
    """A fenced code block that no line of `value` can close (CommonMark 4.5)."""
    text = str(value)
    fence = "`" * max(3, _longest_run(text, "`") + 1)
    return [fence, text, fence]


def _longest_run(text: str, char: str) -> int:
    longest = run = 0
    for c in text:
        run = run + 1 if c == char else 0
        longest = max(longest, run)
    return longest


def markdown(r: RunFacts, html_path: Optional[str] = None) -> str:
    """The short version: outcome, thresholds, drift, serving skew, anomalies. Everything that
    comes from the data or a message goes through md_text / md_code / md_block: the KFP UI
    renders this."""
    lines = [f"# Run report: {md_text(r.pipeline)} {md_code(r.run_id)}", "",
             f"**{md_text(words.decision(r))}**", ""]
    if words.release(r):
        lines += [f"Release: {md_text(words.release(r))}", ""]
    if r.error:
        lines += ["The run stopped:", "", *md_block(r.error), ""]
    lines += [f"- config hash {md_code(r.config_hash)}",
              *[f"- span {md_text(s.span)}: {md_code(path)} ({count} rows)" for s in r.spans
                for path, count in s.files], ""]
    if r.thresholds:
        lines += ["| metric | rule | value | verdict |", "|---|---|---|---|"]
        for t in r.thresholds:
            verdict = ("not evaluated" if t.passed is None else t.passed
                       if isinstance(t.passed, str) else "pass" if t.passed else "FAIL")
            lines.append(f"| {md_text(t.metric)} | {md_text(t.rule)} | {_number(t.value)} | "
                         f"{md_text(verdict)} |")
        lines.append("")
    if r.retrieval is not None:
        lines += [f"Retrieval: {md_text(words.retrieval(r.retrieval))}", ""]
    drift = r.drift
    if drift and drift["features"]:
        drifted = [f["feature"] for f in drift["features"] if f["drifted"]]
        lines.append(f"Drift (span {md_text(drift['newest_span'])} vs "
                     f"{md_text(drift['previous_span'])}): "
                     + (f"{md_text(', '.join(drifted))} ({md_text(drift['action'])})"
                        if drifted else "none"))
        if drift.get("window"):
            moved = [f["feature"] for f in drift["window"]["features"] if f["drifted"]]
            lines.append(f"Drift against the training window "
                         f"({md_text(', '.join(drift['window']['spans']))}): "
                         f"{md_text(', '.join(moved)) or 'none'}")
    if words.skew(r):
        lines.append(f"Serving skew: {md_text(words.skew(r))}")
    if r.anomalies:
        lines.append(f"Anomalies: {len(r.anomalies)}: " + "; ".join(
            f"{md_text(a.feature)} {md_text(a.kind)}" for a in r.anomalies))
    if html_path:
        lines += ["", f"Full report: {md_code(html_path)}"]
    return "\n".join(lines) + "\n"
