"""`python -m pipeline.notify`: a failed night's message, posted to a webhook on loopback."""
from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def loopback_webhook():
    """A loopback webhook: (its URL, its handler: the requests it received, its status)."""
    handler = type("Handler", (_Webhook,), {"received": [], "status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield (f"http://127.0.0.1:{server.server_address[1]}/services/T0/B0/secret", handler)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def webhook():
    with loopback_webhook() as hook:
        yield hook


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
    assert "could not post to the webhook at http://127.0.0.1:" in capsys.readouterr().err


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


# Issue 42, item 11: https only, no redirects, the URL's credentials never printed, the posted
# text stripped of secrets and chat mentions.

@pytest.fixture
def redirecting():
    """A loopback server that answers every POST with a 302 to a second loopback server, which
    counts what reaches it: (the first one's URL, the second one's received list)."""
    target = type("Target", (_Webhook,), {"received": [], "status": 200})
    second = http.server.ThreadingHTTPServer(("127.0.0.1", 0), target)

    class Redirect(_Webhook):
        received = []

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{second.server_address[1]}/stolen")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST  # noqa: N815

    first = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threads = [threading.Thread(target=s.serve_forever, args=(0.05,), daemon=True)
               for s in (first, second)]
    for thread in threads:
        thread.start()
    yield f"http://127.0.0.1:{first.server_address[1]}/services/T0/B0/secret", target.received
    for server in (first, second):
        server.shutdown()
        server.server_close()


def test_a_redirect_is_not_followed_and_fails_naming_its_status(night, redirecting, monkeypatch,
                                                               capsys):
    config, _ = night
    url, reached_target = redirecting
    monkeypatch.setenv(ENV, url)
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 1
    error = capsys.readouterr().err
    assert "HTTP 302" in error and "redirect" in error and "not followed" in error
    assert "secret" not in error and "stolen" not in error
    assert reached_target == []


@pytest.mark.parametrize("url", [
    "http://hooks.example.invalid/services/T0/B0/secret",
    "http://10.0.0.7:8080/services/T0/B0/secret",
    "ftp://hooks.example.invalid/services/T0/B0/secret",
])
def test_plain_http_is_refused_unless_to_loopback(night, monkeypatch, capsys, url):
    config, _ = night
    monkeypatch.setenv(ENV, url)
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 2
    error = capsys.readouterr().err
    assert "https" in error and "loopback" in error
    assert "secret" not in error and "T0" not in error


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_plain_http_to_loopback_is_allowed(night, webhook, monkeypatch, host):
    config, _ = night
    url, handler = webhook
    monkeypatch.setenv(ENV, url.replace("127.0.0.1", host))
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 0
    assert len(handler.received) == 1


def test_credentials_in_the_url_are_never_printed(night, webhook, monkeypatch, capsys):
    """Userinfo is sent as basic auth, not printed; a bad port or an unreachable host print the
    URL redacted, never its path, query or password."""
    config, _ = night
    url, handler = webhook
    port = url.split(":")[2].split("/")[0]
    monkeypatch.setenv(ENV, url.replace("://", "://hookuser:hunter2pw@") + "?token=qtok42")
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 0
    assert handler.received[0][0] == "/services/T0/B0/secret?token=qtok42"
    out = capsys.readouterr()
    for bad in (f"http://user:hunter2pw@127.0.0.1:{port}x/services/T0/B0/secret?token=qtok42",
                "http://user:hunter2pw@127.0.0.1:1/services/T0/B0/secret?token=qtok42",
                "https://user:hunter2pw@[::1/services/T0/B0/secret?token=qtok42"):
        monkeypatch.setenv(ENV, bad)
        assert notify.main(["--config", str(config), "--unit", "u.service"]) in (1, 2)
        out = capsys.readouterr()
        text = out.out + out.err
        assert "error:" in text
        for secret in ("hunter2pw", "T0", "qtok42", "secret", "user"):
            assert secret not in text, (bad, text)


def test_redacted_url_keeps_only_scheme_host_and_port():
    assert (notify.redacted_url("https://hooks.slack.com/services/T1/B2/xyz?a=b")
            == "https://hooks.slack.com/<redacted>")
    assert notify.redacted_url("http://u:p@127.0.0.1:8080/") == "http://127.0.0.1:8080/<redacted>"
    assert notify.redacted_url("https://example.com") == "https://example.com"
    assert notify.redacted_url("not a url :// at all") == "<a URL, redacted>"


HOSTILE_LINES = [
    "error: <!channel> <!here> <!everyone> <!subteam^S012|@oncall> hi <@U123ABC> <@W9|bob>",
    "error: @channel @here @everyone look",
    "error: connect failed password=hunter2 passwd: swordfish api_key='k-123456' "
    "secret_token=\"abcd\"",
    "error: request had Authorization: Bearer eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl",
    "error: Authorization: Basic dXNlcjpwYXNz",
    "error: posting to https://hooks.slack.com/services/T01ABC/B02DEF/XyZsecretHook9 failed",
    "error: db at postgresql://admin:S3cretPw@db.internal:5432/x refused",
    "error: key AKIAIOSFODNN7EXAMPLE and token xoxb-123456789012-abcdefABCDEF and "
    "ghp_0123456789abcdefghijABCDEFGHIJ012345 and glpat-abcdefghij0123456789",
    "error: jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9Py",
    "error: -----BEGIN RSA PRIVATE KEY----- MIIEpAIBAAKCAQEA -----END RSA PRIVATE KEY-----",
    "error: header X-Api-Key: 0f3c9e2b7a1d4c6e8b0a2f4d6c8e0a1b",
    "error: aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
]
LEAKS = ["<!channel>", "<!here>", "<!everyone>", "<!subteam", "<@U123ABC>", "<@W9", "@channel",
         "@here", "@everyone", "hunter2", "swordfish", "k-123456", "abcd\"", "eyJhbGciOi",
         "dXNlcjpwYXNz", "XyZsecretHook9", "T01ABC", "S3cretPw", "admin:", "AKIAIOSFODNN7EXAMPLE",
         "xoxb-", "ghp_0123", "glpat-", "dozjgNryP4J3", "MIIEpAIBAAKCAQEA",
         "0f3c9e2b7a1d4c6e8b0a2f4d6c8e0a1b", "wJalrXUtnFEMI", "bPxRfiCYEXAMPLEKEY"]


@pytest.mark.parametrize("line", HOSTILE_LINES)
def test_the_posted_error_line_carries_no_secret_and_no_mention(tmp_path, webhook, monkeypatch,
                                                                line):
    config = write_config(tmp_path, {"notify.webhook_env": ENV})
    url, handler = webhook
    monkeypatch.setenv(ENV, url)
    monkeypatch.setattr(notify, "_journal_lines", lambda *_: ["Running", line])
    assert notify.main(["--config", str(config), "--unit", "u.service"]) == 0
    text = json.loads(handler.received[0][2])["text"]
    assert "last error: error:" in text
    for leak in LEAKS:
        assert leak not in text, (leak, text)
    assert "[redacted]" in text or "[mention]" in text


def test_scrub_keeps_an_ordinary_error_line_whole():
    line = ("error: DriftError: feature feature_a drifted 0.4 > 0.3 in "
            "/srv/out/my-pipeline/Transform/transformed_examples/12/Split-train (run 2026-12-02)")
    assert notify.scrub(line) == line


def test_an_exceptions_text_loses_the_urls_credentials():
    from pipeline.redact import without

    url = "http://hookuser:pw42@127.0.0.1:8/services/T0/B0/hooksecret?token=q9"
    text = without(f"nonnumeric port: 'hookuser:pw42@127.0.0.1:8' in {url}, "
                   "path /services/T0/B0/hooksecret?token=q9", url)
    for secret in ("hookuser", "pw42", "hooksecret", "q9", "T0"):
        assert secret not in text, text


def test_the_run_id_and_report_uri_are_kept_whole_and_only_mentions_leave_them():
    run_id = "3f2c1a9e-7b4d-4e2a-9c1f-0a1b2c3d4e5f"
    report = f"gs://bucket/pipeline-root/my-pipeline/{run_id}/RunExit/html"
    text = notify.message("my-pipeline", f"Kubeflow run {run_id}", "failed at Trainer <!here>",
                          report, "error: token=abc123 from <@U1>", host="Kubeflow")["text"]
    assert f"Kubeflow run {run_id}" in text and f"report: {report}" in text
    assert "failed at Trainer [mention]" in text
    assert "last error: error: token=[redacted] from [mention]" in text
