"""Opens a page in Debian's headless chromium as a person would, over the DevTools protocol on a
pipe (--remote-debugging-pipe: no port, no extra package): records every failed load, console
error and request that leaves the file, reads the DOM, and takes a full-page screenshot."""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import pytest

INSTALL_HINT = "run scripts/install_test_tools.sh (installs the Debian package chromium)"
# What the page exposes to the check: section ids and every image's load state.
PAGE_STATE = """JSON.stringify({
  sections: Array.from(document.querySelectorAll('section[id]')).map(s => s.id),
  images: Array.from(document.images).map(i => ({src: i.src.slice(0, 80), complete: i.complete,
                                                 width: i.naturalWidth})),
  svgs: document.querySelectorAll('svg').length,
  text: document.body.innerText})"""


@dataclasses.dataclass
class PageCheck:
    sections: List[str]
    images: List[Dict]
    svgs: int
    text: str
    failed_loads: List[str]  # URL and error of each resource that did not load
    console_errors: List[str]
    requests: List[str]  # every URL the page asked for
    screenshot: Path

    @property
    def broken_images(self) -> List[str]:
        return [i["src"] for i in self.images if not i["complete"] or i["width"] == 0]

    @property
    def external_requests(self) -> List[str]:
        """Requests outside the file and inline data: the page would need a network."""
        return [u for u in self.requests if not u.startswith(("file:", "data:", "about:"))]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(f"chromium not found on PATH: {INSTALL_HINT}")
    return found


class _Pipe:
    def __init__(self, to_browser, from_browser):
        self.to_browser, self.from_browser = to_browser, from_browser
        self.next_id, self.buffer, self.events = 0, b"", []

    def send(self, method: str, params: dict = None, session: str = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium sent no {method} within {timeout}s")
            self.events.append(self._read())

    def _read(self) -> dict:
        while b"\0" not in self.buffer:
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)


def open_page(html_path: Path, screenshot: Path, width: int = 1200,
              timeout: float = 60) -> PageCheck:
    """Loads html_path from disk, waits for its load event, and checks it (see PageCheck)."""
    # fds 3 and 4 in the child: it reads commands from 3 and writes replies to 4.
    command_read, command_write = os.pipe()
    reply_read, reply_write = os.pipe()
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    process = subprocess.Popen(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--remote-debugging-pipe",
         f"--window-size={width},900", "about:blank"],
        pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=lambda: (os.dup2(command_read, 3), os.dup2(reply_write, 4)))
    os.close(command_read)
    os.close(reply_write)
    pipe = _Pipe(command_write, reply_read)
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            pipe.send(f"{domain}.enable", session=session)
        pipe.send("Page.navigate", {"url": html_path.resolve().as_uri()}, session=session)
        pipe.wait_for("Page.loadEventFired", timeout)
        state = json.loads(pipe.send("Runtime.evaluate", {
            "expression": PAGE_STATE, "returnByValue": True}, session=session)["result"]["value"])
        size = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
        shot = pipe.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                     "scale": 1}}, session=session)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        pipe.send("Browser.close")
    finally:
        os.close(command_write)
        os.close(reply_read)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)
    events = pipe.events
    requests = {e["params"]["requestId"]: e["params"]["request"]["url"] for e in events
                if e.get("method") == "Network.requestWillBeSent"}
    return PageCheck(
        sections=state["sections"], images=state["images"], svgs=state["svgs"],
        text=state["text"],
        failed_loads=[f"{requests.get(e['params']['requestId'], '?')}: "
                      f"{e['params']['errorText']}" for e in events
                      if e.get("method") == "Network.loadingFailed"],
        console_errors=[e["params"]["entry"]["text"] for e in events
                        if e.get("method") == "Log.entryAdded"
                        and e["params"]["entry"]["level"] == "error"]
        + [e["params"]["exceptionDetails"]["text"] for e in events
           if e.get("method") == "Runtime.exceptionThrown"],
        requests=list(requests.values()), screenshot=screenshot)
