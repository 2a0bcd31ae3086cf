"""A local run's summary and report, from the local metadata store: the app's side of
components/run_report, which reads a run's facts (reader.py) and renders them (console.py,
render.py, charts.py). Every run, also one stopped by a gate or refused by the Evaluator, gets
report.html and a short report.md; a run that ended also prints its summary, with its pictures.

Imports no TensorFlow at load: `python -m pipeline.report` only looks for the newest report.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

REPORT_HTML, REPORT_MD = "report.html", "report.md"


def open_store(metadata_path: str):
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata

    return metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(metadata_path))


def run_facts(config, ran: Sequence[str] = (), cached: Sequence[str] = (),
              error: Optional[str] = None, metadata_path: Optional[str] = None):
    """The facts of the newest run in the metadata store (the config's unless metadata_path),
    with what the runner saw of it; `error` is why the run stopped, if it did."""
    from components.run_report import mlmd, reader

    store = open_store(metadata_path or str(config.metadata_path))
    return reader.read_run(store, config, mlmd.latest_run(store), error, ran, cached,
                           serving_now=serving_now(config))


def serving_now(config) -> Optional[str]:
    """The version that serves when the run ends, by ServingBaseline's rule: the newest pushed
    (serving.release: direct) or the Rollout's stable version (canary; None when the cluster
    cannot say: the summary then says nothing of it)."""
    from components.serving_baseline.component import BaselineError, baseline_version
    from core.rollout import rollout_ref

    try:
        return baseline_version(str(config.model_base_path), rollout_ref(config.serving))
    except BaselineError:
        return None


def summary(facts, report_dir: Path) -> str:
    """The console summary, naming its pictures (written in report_dir)."""
    from components.run_report import charts, console

    return console.summary(facts, [str(path) for path in charts.pictures(facts, report_dir)])


def write_report(facts, report_dir: Path, config) -> Path:
    """Writes report.html and report.md, and the skew check's figures for Prometheus beside
    them and in the config's node_exporter textfile directory (components/run_report/
    skew_textfile.py); returns the HTML's path."""
    from components.run_report import render, skew_textfile

    report_dir.mkdir(parents=True, exist_ok=True)
    html_path = report_dir / REPORT_HTML
    html_path.write_text(render.html(facts))
    (report_dir / REPORT_MD).write_text(render.markdown(facts, str(html_path)))
    skew_textfile.export(facts, str(report_dir), config)
    return html_path


def latest_report(output_dir: Path) -> Optional[Path]:
    """The newest report.html under <output_dir>/reports, or None."""
    reports = sorted((output_dir / "reports").glob(f"*/{REPORT_HTML}"),
                     key=lambda p: p.stat().st_mtime)
    return reports[-1] if reports else None

