"""The run report: one self-contained HTML page and a short Markdown version per run, written for
every run (stopped by a gate or refused by the Evaluator too), plus the PNG pictures of the
summary. `collect` reads what the run did from ML Metadata, `render` writes it, `svg` draws."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from pipeline.report.plots import metrics_by_slice, plot_evaluation, plot_statistics

REPORT_HTML, REPORT_MD = "report.html", "report.md"


def write_report(config, report_dir: Path, error: Optional[str] = None,
                 metadata_path: Optional[str] = None) -> Path:
    """Writes report.html and report.md for the newest run in the metadata store; returns the
    HTML's path. `error` is why the run stopped, if it did."""
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata

    from pipeline.report import collect, render
    from pipeline.summary import latest_run

    store = metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(
        metadata_path or str(config.metadata_path)))
    content = collect.collect(store, config, latest_run(store), error)
    report_dir.mkdir(parents=True, exist_ok=True)
    html_path = report_dir / REPORT_HTML
    html_path.write_text(render.html(content))
    (report_dir / REPORT_MD).write_text(render.markdown(content, str(html_path)))
    return html_path


def latest_report(output_dir: Path) -> Optional[Path]:
    """The newest report.html under <output_dir>/reports, or None."""
    reports = sorted((output_dir / "reports").glob(f"*/{REPORT_HTML}"),
                     key=lambda p: p.stat().st_mtime)
    return reports[-1] if reports else None


__all__ = ["write_report", "latest_report", "metrics_by_slice", "plot_evaluation",
           "plot_statistics"]
