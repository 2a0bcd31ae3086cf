"""Console progress for a local run: one line per component, the full log in a file.

TFX's LocalDagRunner logs 'Component X is running.' / 'is finished.' and 'A cached execution N is
used.'; this handler turns those into readable lines and records which components came from cache.
"""
from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, TextIO, Tuple

_RUNNING = re.compile(r"Component (\S+) is running\.")
_FINISHED = re.compile(r"Component (\S+) is finished\.")
_CACHED = re.compile(r"A cached execution \d+ is used\.")


class ProgressHandler(logging.Handler):
    def __init__(self, stream: TextIO = sys.stdout):
        super().__init__(logging.INFO)
        self.stream = stream
        self.started: Dict[str, float] = {}
        self.ran: List[str] = []
        self.cached: List[str] = []
        self._current = None
        self._current_cached = False
        self._running: Optional[str] = None  # started, not yet finished

    def current_step(self) -> Tuple[Optional[str], float]:
        """The step running now and when it started (time.monotonic), or (None, 0.0)."""
        running = self._running
        return (running, self.started[running]) if running is not None else (None, 0.0)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if match := _RUNNING.search(message):
            self._current, self._current_cached = match.group(1), False
            self.started[self._current] = time.monotonic()
            self._running = self._current
            self.stream.write(f"  > {self._current} ...\n")
        elif _CACHED.search(message):
            self._current_cached = True
        elif match := _FINISHED.search(message):
            name = match.group(1)
            if name == self._running:
                self._running = None
            seconds = time.monotonic() - self.started.get(name, time.monotonic())
            cached = self._current_cached and name == self._current
            (self.cached if cached else self.ran).append(name)
            self.stream.write(f"  ✓ {name} {'(from cache) ' if cached else ''}{seconds:.1f}s\n")
        self.stream.flush()


def configure_logging(log_dir: Path) -> tuple[ProgressHandler, Path]:
    """Everything to a timestamped log file; progress lines to the console."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / time.strftime("run-%Y%m%d-%H%M%S.log")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    file_handler = logging.FileHandler(log_file)
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    progress = ProgressHandler()
    root.addHandler(file_handler)
    root.addHandler(progress)
    # absl (TFX's logger) writes to stderr by default; route it through the root logger instead.
    from absl import logging as absl_logging
    absl_logging.set_verbosity(absl_logging.INFO)
    absl_logger = absl_logging.get_absl_logger()
    for handler in list(absl_logger.handlers):
        absl_logger.removeHandler(handler)
    absl_logger.propagate = True
    # TensorFlow's Python logger prints to stderr itself; send it to the file like the rest.
    tf_logger = logging.getLogger("tensorflow")
    for handler in list(tf_logger.handlers):
        tf_logger.removeHandler(handler)
    tf_logger.propagate = True
    return progress, log_file
