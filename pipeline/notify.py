"""`python -m pipeline.notify --config FILE --unit NAME`: tells someone that a night failed.

Posts one Slack-compatible message (`{"text": "..."}`) to the incoming webhook that the config's
`notify` section names (an environment variable or a file: the URL is never in the repository):
which pipeline, which run (the unit, its systemd invocation), the outcome and what its exit status
means (pipeline/run.py), the newest run report's path when there is one (pipeline/report) and the
last error line of the run (its journal, else the newest log under runner.output_dir/logs).
deploy/systemd/tfx-pipeline-notify@.service runs it as the nightly service's OnFailure= unit;
systemd (>= 251) hands it the failed unit's result in MONITOR_SERVICE_RESULT, MONITOR_EXIT_CODE,
MONITOR_EXIT_STATUS and MONITOR_INVOCATION_ID.

The URL must be https (plain http only to a loopback host, for tests); a redirect is not
followed (a 3xx is a failure); the URL is printed only as scheme://host:port (its path, query and
userinfo are credentials), and userinfo is sent as basic auth. The posted text is scrubbed
(pipeline/redact.py): what looks like a secret becomes `[redacted]`, chat mentions `[mention]`.

Exit status: 0 posted; 1 the webhook did not take it (an HTTP error, a redirect, a timeout, no
connection); 2 unusable config, or no usable webhook URL (the variable unset or empty, the file
missing, not https).
"""
from __future__ import annotations

import argparse
import base64
import glob
import http.client
import ipaddress
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import List, Optional

from core.cli import add_config_argument, refuse
from core.config import ConfigError, load_config
from pipeline.redact import redacted_url, scrub, without, without_mentions

# What pipeline.run's exit statuses mean (its docstring).
EXIT_MEANINGS = {
    "1": "the run failed",
    "2": "unusable config",
    "3": "another local run holds the output folder (this one did nothing)",
}


class NotifyError(RuntimeError):
    """Why no message was posted; exit_status is this CLI's."""

    def __init__(self, message: str, exit_status: int):
        super().__init__(message)
        self.exit_status = exit_status


def webhook_url(notify) -> str:
    """The URL from the file the config names, else from its environment variable."""
    if notify.webhook_file is not None:
        try:
            url = Path(notify.webhook_file).read_text().strip()
        except OSError as error:
            raise NotifyError(f"notify.webhook_file {notify.webhook_file} cannot be read: "
                              f"{error.strerror}", 2) from None
        where = f"file {notify.webhook_file}"
    else:
        url = os.environ.get(notify.webhook_env, "").strip()
        where = f"environment variable {notify.webhook_env} (notify.webhook_env)"
    if not url:
        raise NotifyError(f"no webhook URL: {where} is unset or empty; set it to the incoming "
                          "webhook's URL (deploy/systemd/README.md)", 2)
    try:
        parts = urllib.parse.urlsplit(url)
        host, _ = parts.hostname, parts.port
    except ValueError:
        host = None
    if not host:
        raise NotifyError(f"the webhook URL in {where} ({redacted_url(url)}) is not a URL with a "
                          "host", 2)
    scheme = parts.scheme.lower()
    if scheme != "https" and not (scheme == "http" and _loopback(host)):
        raise NotifyError(f"the webhook URL in {where} ({redacted_url(url)}) must be https: the "
                          "message and the URL's credential would cross the network in the clear "
                          "(plain http is allowed to a loopback host only, for tests)", 2)
    return url


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def outcome(environ=os.environ) -> str:
    """The failed unit's result as systemd hands it to an OnFailure= unit, with the meaning of
    pipeline.run's exit status."""
    result = environ.get("MONITOR_SERVICE_RESULT")
    status = environ.get("MONITOR_EXIT_STATUS")
    if not result and not status:
        return "failed"
    text = result or "failed"
    if status:
        text += f" (exit {status}"
        meaning = EXIT_MEANINGS.get(status)
        text += f": {meaning})" if meaning else ")"
    return text


def _journal_lines(invocation_id: Optional[str], unit: str) -> List[str]:
    """The run's journal (its invocation's lines, else the unit's last ones); [] without one."""
    match = [f"_SYSTEMD_INVOCATION_ID={invocation_id}"] if invocation_id else ["-u", unit,
                                                                              "-n", "200"]
    try:
        done = subprocess.run(["journalctl", "--no-pager", "-o", "cat", *match],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []


def _newest_log_lines(log_dir: Path) -> List[str]:
    logs = sorted(glob.glob(str(log_dir / "*.log")), key=os.path.getmtime)
    if not logs:
        return []
    try:
        return Path(logs[-1]).read_text(errors="replace").splitlines()
    except OSError:
        return []


def last_error_line(lines: List[str]) -> Optional[str]:
    """The last line that reports an error: run.py's `error: ...`, else a traceback's last."""
    for line in reversed(lines):
        if line.strip().lower().startswith("error:"):
            return line.strip()
    for line in reversed(lines):
        stripped = line.strip()
        if stripped and ("Error" in stripped.split(":", 1)[0] or "Exception" in stripped):
            return stripped
    return None


def message(pipeline_name: str, unit: str, result: str, report: Optional[Path],
            error_line: Optional[str], invocation_id: Optional[str] = None,
            host: Optional[str] = None) -> dict:
    run = unit + (f" (invocation {invocation_id})" if invocation_id else "")
    # The journal's line may quote a credential or a chat mention: neither reaches the chat. The
    # other lines are ours (a run id, a report URI: kept whole), their mentions stripped too.
    error_line = scrub(error_line) if error_line else None
    lines = [f"Pipeline '{pipeline_name}' on {host or socket.gethostname()}: nightly run {result}",
             f"run: {run}",
             f"report: {report}" if report else "report: none written",
             f"last error: {error_line}" if error_line else "last error: none found"]
    return {"text": without_mentions("\n".join(lines))}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx is not followed (it would carry the message, and a basic-auth header, wherever the
    answer points): urllib then raises it as an HTTPError."""

    def redirect_request(self, *args, **kwargs):
        return None


def post(url: str, payload: dict, timeout_s: float) -> None:
    # The URL's path, query and userinfo are its secret: errors name only redacted_url(url).
    shown = redacted_url(url)
    headers = {"Content-Type": "application/json"}
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.username is not None:
            login = f"{urllib.parse.unquote(parts.username)}:" \
                    f"{urllib.parse.unquote(parts.password or '')}"
            headers["Authorization"] = "Basic " + base64.b64encode(login.encode()).decode()
            url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
        request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                         headers=headers)
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=timeout_s) as answer:
            answer.read()
    except urllib.error.HTTPError as error:
        if 300 <= error.code < 400:
            raise NotifyError(f"the webhook at {shown} answered HTTP {error.code}, a redirect, "
                              "not followed (set the URL it should be); no message was posted",
                              1) from None
        raise NotifyError(f"the webhook at {shown} answered HTTP {error.code} "
                          f"{without(str(error.reason), url)}; no message was posted", 1) from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as error:
        reason = without(str(getattr(error, "reason", error)), url)
        raise NotifyError(f"could not post to the webhook at {shown} within {timeout_s:g} s: "
                          f"{reason}", 1) from None


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.notify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_argument(parser, help="pipeline config YAML")
    parser.add_argument("--unit", required=True, help="the failed unit (systemd's %%i)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        url = webhook_url(config.notify)
    except ConfigError as error:
        return refuse(error)
    except NotifyError as error:
        return refuse(error, error.exit_status)
    from pipeline.report import latest_report

    invocation_id = os.environ.get("MONITOR_INVOCATION_ID")
    error_line = (last_error_line(_journal_lines(invocation_id, args.unit))
                  or last_error_line(_newest_log_lines(config.log_dir)))
    payload = message(config.pipeline_name, args.unit, outcome(),
                      latest_report(config.runner.output_dir), error_line, invocation_id)
    try:
        post(url, payload, config.notify.timeout_s)
    except NotifyError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_status
    print(f"posted the failure of {args.unit} to the webhook")
    return 0


if __name__ == "__main__":
    sys.exit(main())
