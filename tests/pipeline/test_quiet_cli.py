"""pipeline.quiet_cli hides the pinned libraries' deprecation notices, not the template's own."""
import subprocess
import sys

from tests.helpers import REPO

# Each warning attributed to a module by name, as `warnings.warn(..., stacklevel=...)` does.
PROBE = """
import warnings
import pipeline
pipeline.quiet_cli()
for module in ("google.cloud.aiplatform.models", "tensorflow.python.util", "apache_beam.io",
               "components.evaluator.executor", "core.config", "pipeline.run", "models.model"):
    for category in (FutureWarning, DeprecationWarning):
        warnings.warn_explicit(f"{category.__name__} from {module}", category, "f.py", 1,
                               module=module)
"""


def test_library_notices_hidden_ours_shown():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                          text=True, check=True)
    shown = {line.split(": ", 2)[2] for line in done.stderr.splitlines() if " from " in line}
    # DeprecationWarnings outside __main__ are Python's own default to hide; FutureWarnings are
    # for users, and the template's own must reach them.
    ours = {f"FutureWarning from {module}" for module in
            ("components.evaluator.executor", "core.config", "pipeline.run", "models.model")}
    assert shown == ours, done.stderr
