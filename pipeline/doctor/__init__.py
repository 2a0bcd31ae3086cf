"""What this machine can run, checked against what the config asks for.

    python -m pipeline.doctor [--runner local|kubeflow] [--config configs/pipeline.yaml]
    (or: make doctor, make doctor RUNNER=kubeflow)

Reports TensorFlow's build (the CUDA and cuDNN it was built for), the visible GPUs and their
compute capability, NCCL, XLA, threads, the Keras in use, which distribution strategies and
precisions this machine can run, and whether each path in the config can be reached from here.
With --runner kubeflow, and kubectl reaching a cluster: the KFP backend's version, its object
store, and whether the run namespace's kfp-launcher ConfigMap lets the steps read and write the
pipeline root (one line, and nothing failed, when kubectl is absent or reaches no cluster).
Exit 0 when everything the config asks for is here, 1 (with the fix) when something is missing,
2 for a config that does not load.
"""
from __future__ import annotations

import argparse
from typing import List, Optional

import pipeline  # (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

pipeline.quiet_cli()

from core.cli import add_config_argument, refuse  # noqa: E402
from core.config import ConfigError, load_config  # noqa: E402
from pipeline.doctor.asked import config_findings  # noqa: E402
from pipeline.doctor.cluster import cluster_findings  # noqa: E402
from pipeline.doctor.findings import FAIL, report  # noqa: E402
from pipeline.doctor.machine import Machine, machine_findings, python_finding  # noqa: E402


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.doctor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runner", choices=["local", "kubeflow"], default="local",
                        help="local: this machine runs the steps (default); kubeflow: it "
                        "compiles the spec and the cluster's pods run the steps")
    add_config_argument(parser, help="pipeline config YAML (default: configs/pipeline.yaml)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        return refuse(error)
    machine = Machine.here()
    asked = config_findings(config, machine, args.runner)
    print(report(machine_findings(machine)))
    print(f"\nwhat {args.config} asks for ({args.runner} runner):")
    print(report(asked) if asked else "  nothing this machine lacks")
    if args.runner == "kubeflow":
        found = cluster_findings(config)
        print("\nthe cluster kubectl reaches (KFP):")
        print(report(found))
        asked += found
    failures = [f for f in [python_finding(), *asked] if f.level == FAIL]
    print(f"\n{len(failures)} problem(s)" if failures else "\nready to run this config here")
    return 1 if failures else 0
