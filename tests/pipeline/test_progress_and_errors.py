"""What the user sees: one line per component, and one readable line for a failure."""
from __future__ import annotations

import io
import logging

from core.progress import ProgressHandler


def _log(handler, message):
    handler.emit(logging.LogRecord("absl", logging.INFO, __file__, 1, message, None, None))


def test_progress_lines_and_cache_hits():
    stream = io.StringIO()
    handler = ProgressHandler(stream)
    _log(handler, "Component CsvExampleGen is running.")
    _log(handler, "A cached execution 3 is used.")
    _log(handler, "Component CsvExampleGen is finished.")
    _log(handler, "Component Trainer is running.")
    _log(handler, "Component Trainer is finished.")
    assert handler.cached == ["CsvExampleGen"] and handler.ran == ["Trainer"]
    lines = stream.getvalue().splitlines()
    assert lines[0] == "  > CsvExampleGen ..."
    assert lines[1].startswith("  ✓ CsvExampleGen (from cache)")
    assert lines[3].startswith("  ✓ Trainer ") and "cache" not in lines[3]


def test_our_errors_surface_through_beam_wrapping():
    from components.anomaly_gate.component import AnomaliesFoundError
    from components.example_gen.csv_reader import DataError
    from pipeline.errors import readable_cause

    try:
        try:
            raise DataError("f.csv, line 3, column 'x': 'y' is not a number")
        except DataError as inner:
            # Unchained, as Beam re-raises a worker's error: only the message carries the cause.
            raise RuntimeError(  # noqa: B904
                f"{type(inner).__name__}: {inner} [while running 'ParseCsv']")
    except RuntimeError as outer:
        assert readable_cause(outer) == "f.csv, line 3, column 'x': 'y' is not a number"
    assert readable_cause(AnomaliesFoundError("3 anomalies")) == "3 anomalies"
    assert readable_cause(ValueError("boom")) == "ValueError: boom"
    # A job the runner reports failed (a cluster's job server): the job, its state, the cause,
    # and where to look.
    failed = RuntimeError("Pipeline night-statisticsgen_7f9f79b9-2f5b-44dd-bf51-b53ff34726a9 "
                          "failed in state FAILED: java.net.ConnectException: refused")
    assert readable_cause(failed).startswith(
        "the Beam job night-statisticsgen ended FAILED on the runner: "
        "java.net.ConnectException: refused (check the job's exceptions")
    import grpc

    class Lost(grpc.RpcError):  # as grpc's _MultiThreadedRendezvous answers a dead server
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def details(self):
            return "Socket closed"

    assert readable_cause(RuntimeError("wait")).startswith("RuntimeError")
    try:
        try:
            raise Lost("<_MultiThreadedRendezvous of RPC that terminated with:\n...>")
        except Lost as lost:
            raise RuntimeError("waiting on the job") from lost
    except RuntimeError as outer:
        assert readable_cause(outer) == (
            "the Beam job service stopped answering mid-run (UNAVAILABLE: Socket closed): check "
            "that the job server runner.beam_args --job_endpoint names is up (make "
            "flink-status; its log), then run again")
