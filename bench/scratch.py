"""A benchmark's scratch folder, from start to end: made under the system's temp folder, and at
the end named (the benchmark's --keep: its logs, pipeline roots and metadata to look at) or
removed. bench/evaluator.py, pipeline_runtime.py, scale.py, step_resources.py and step_startup.py
end this way."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


def scratch_folder(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def keep_or_remove(folder: Path, keep: bool) -> None:
    """The benchmark's last line: the folder it kept, or nothing once removed."""
    if keep:
        print(f"\nkept: {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
