"""`python -m pipeline.notify`: a failed night's message, posted to a webhook on loopback."""
from __future__ import annotations

import http.server
import json
import os
import threading

import pytest

from core.config import load_config
from pipeline import notify
from tests.helpers import write_config

ENV = "TEST_PIPELINE_WEBHOOK_URL"


class _Webhook(http.server.BaseHTTPRequestHandler):
    status = 200
    received: list

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(self.status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    """A loopback webhook: (its URL, the requests it received, a setter of its status)."""
    handler = type("Handler", (_Webhook,), {"received": [], "status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield (f"http://127.0.0.1:{server.server_address[1]}/services/T0/B0/secret", handler)
    server.shutdown()
    server.server_close()


@pytest.fixture
def night(tmp_path, monkeypatch):
    """A config whose output folder holds a failed night: two reports, a log with its error."""
    config = write_config(tmp_path, {"notify.webhook_env": ENV})
    outputs = tmp_path / "outputs"
    for i, stamp in enumerate(("20261201-020000", "20261202-020000")):
        report = outputs / "reports" / stamp / "report.html"
        report.parent.mkdir(parents=True)
        report.write_text("<html></html>")
        os.utime(report, (1_000_000 + i, 1_000_000 + i))
    (outputs / "logs").mkdir()
    (outputs / "logs" / "20261202-020000.log").write_text(
        "INFO started\nTraceback (most recent call last):\n  File x\n"
        "DriftError: feature feature_a drifted 0.4 > 0.3\n")
    # No journal here: the error line comes from the newest log.
    monkeypatch.setattr(notify, "_journal_lines", lambda *_: [])
    for name in ("MONITOR_SERVICE_RESULT", "MONITOR_EXIT_STATUS", "MONITOR_INVOCATION_ID"):
        monkeypatch.delenv(name, raising=False)
    return config, outputs / "reports" / "20261202-020000" / "report.html"


def test_the_message_names_pipeline_unit_outcome_report_and_last_error(night, webhook,
                                                                       monkeypatch, capsys):
    config, newest_report = night
    url, handler = webhook
    monkeypatch.setenv(ENV, url)
    monkeypatch.setenv("MONITOR_SERVICE_RESULT", "exit-code")
    monkeypatch.setenv("MONITOR_EXIT_STATUS", "1")
    monkeypatch.setenv("MONITOR_INVOCATION_ID", "0123abcd")

    assert notify.main(["--config", str(config), "--unit", "tfx-pipeline-nightly.service"]) == 0
    [(path, content_type, body)] = handler.received
    assert path == "/services/T0/B0/secret"
    assert content_type == "application/json"
    payload = json.loads(body)
    assert list(payload) == ["text"]
    text = payload["text"]
    assert f"Pipeline '{load_config(config).pipeline_name}'" in text
    assert "tfx-pipeline-nightly.service (invocation 0123abcd)" in text
    assert "exit-code (exit 1: the run failed)" in text
    assert f"report: {newest_report}" in text
    assert "last error: DriftError: feature feature_a drifted 0.4 > 0.3" in text
    assert "posted" in capsys.readouterr().out


def test_the_journals_error_line_wins_and_no_report_is_said(tmp_path, webhook, monkeypatch):
    config = write_config(tmp_path, {"notify.webhook_env": ENV})
    url, handler = webhook
    monkeypatch.setenv(ENV, url)
    monkeypatch.setattr(notify, "_journal_lines", lambda *_: [
        "Running pipeline 'p' locally", "error: invalid config x:\n", "  a.b: unknown key"])
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 0
    text = json.loads(handler.received[0][2])["text"]
    assert "report: none written" in text
    assert "last error: error: invalid config x:" in text


def test_a_500_from_the_webhook_exits_1_naming_only_its_host(night, webhook, monkeypatch,
                                                            capsys):
    config, _ = night
    url, handler = webhook
    handler.status = 500
    monkeypatch.setenv(ENV, url)
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 1
    error = capsys.readouterr().err
    assert "HTTP 500" in error and "127.0.0.1" in error
    assert "secret" not in error  # the URL's path is its credential


def test_an_unreachable_webhook_exits_1_within_the_timeout(night, monkeypatch, capsys):
    import socket

    config, _ = night
    with socket.socket() as sock:  # a port that was free: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(ENV, f"http://127.0.0.1:{port}/hook")
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 1
    assert "could not post to the webhook at 127.0.0.1" in capsys.readouterr().err


def test_an_unset_variable_exits_2_naming_it(night, monkeypatch, capsys):
    config, _ = night
    monkeypatch.delenv(ENV, raising=False)
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 2
    error = capsys.readouterr().err
    assert f"environment variable {ENV} (notify.webhook_env) is unset" in error


def test_the_url_file_named_in_config_is_read_relative_to_it(tmp_path, webhook, monkeypatch):
    url, handler = webhook
    (tmp_path / "webhook_url").write_text(url + "\n")
    config = write_config(tmp_path, {"notify.webhook_file": "webhook_url"})
    monkeypatch.setattr(notify, "_journal_lines", lambda *_: [])
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 0
    assert len(handler.received) == 1
    (tmp_path / "webhook_url").unlink()
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 2
