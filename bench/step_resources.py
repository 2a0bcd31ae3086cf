"""Each Kubeflow step's peak memory and CPU, the figures behind `kubeflow.resources`' defaults.

    .venv/bin/python -m bench.step_resources [--rows N] [--seed S] [--keep]

Compiles the spec of configs/pipeline.yaml (its local paths as the pods' paths, no resources
set, so nothing is cut short) and runs it through the emulated KFP backend
(devtools/kfp_backend), each step a process of its own as in its pod. Per step: its peak
resident memory (devtools/kfp_backend/usage.py: its VmHWM and its process tree's summed Pss)
and its CPU seconds.
No --rows: the bundled spans; --rows N: one span of N rows drawn as bench/scale.py draws them.
Prints a table; deploy/kubeflow/README.md (Resources) holds the figures measured.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional
from bench.scratch import keep_or_remove, scratch_folder

REPO = Path(__file__).resolve().parent.parent


def main(argv: Optional[List[str]] = None) -> int:
    from bench.scale import generate
    from core.config import load_config
    from tests.helpers import copy_spans, kubeflow_local_changes, write_config

    parser = argparse.ArgumentParser(prog="python -m bench.step_resources")
    parser.add_argument("--rows", type=int, help="one generated span of N rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)
    scratch = scratch_folder("step-resources-")
    data = scratch / "data"
    if args.rows:
        generate(args.rows, args.seed, data)
    else:
        data = copy_spans(scratch)
    changes = {**kubeflow_local_changes(scratch, data),
               "kubeflow.schema_file": str(REPO / "configs" / "schema.pbtxt"),
               "kubeflow.resources": {"default": {}}}
    config = write_config(scratch, changes, data_dir=data)
    name = load_config(config).pipeline_name
    python = sys.executable
    subprocess.run([python, "-m", "pipeline.run", "--runner", "kubeflow", "--config",
                    str(config)], cwd=REPO, check=True, capture_output=True)
    began = time.perf_counter()
    run = subprocess.run([python, "-m", "devtools.kfp_backend", str(scratch / "spec" /
                          f"{name}.yaml"), "--pipeline-root", str(scratch / "root"),
                          "--no-cache", "--env", f"PYTHONPATH={REPO}"],
                         cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    found = re.search(r"details:\s+(\S+)", run.stdout + run.stderr)
    if run.returncode != 0 or not found:
        print(run.stdout + run.stderr, file=sys.stderr)
        return 1
    tasks = json.loads(Path(found.group(1)).read_text())["tasks"]
    rows = f"{args.rows:,} rows" if args.rows else "the bundled spans"
    print(f"{rows}: {seconds:.0f} s for the run; per step:")
    print(f"{'step':22}{'peak RSS MiB':>14}{'CPU s':>8}")
    for task in tasks.values():
        print(f"{task['name']:22}{task['peak_rss_mib']:14.0f}{task['cpu_seconds']:8.1f}")
    keep_or_remove(scratch, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
