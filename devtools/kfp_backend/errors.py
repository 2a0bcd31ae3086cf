"""The two ways a run stops: the backend would not run it, or one of its steps failed."""
from __future__ import annotations


class SpecError(ValueError):
    """The spec (or the run's settings) is not one the backend would run; says where."""


class TaskFailed(RuntimeError):
    """A step failed; the message holds the end of its log. artifacts: what the launcher still
    recorded for it (from 2.16.0 its executor-logs: versions.py logs_on_failure)."""

    def __init__(self, message: str, artifacts: dict | None = None):
        super().__init__(message)
        self.artifacts = artifacts or {}
