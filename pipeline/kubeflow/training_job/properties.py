"""Writes the exec-properties the pipeline's Trainer gets, for pipeline.kubeflow.training_job.worker
replicas.

    python -m pipeline.kubeflow.training_job.properties --config configs/pipeline.yaml \
        [--set training.distribution_strategy=multi_worker_mirrored ...] > trainer.json

They come from the pipeline's own Trainer component (train/eval steps, the custom_config with
the training section), so a TFJob replica trains exactly as the pipeline's Trainer would. Run it
in its own process: building the pipeline runs TensorFlow ops, after which a multi-worker
strategy can no longer be set up in that process.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

import pipeline  # noqa: F401  (Keras 2 before TensorFlow loads)
from core import nodes


def trainer_exec_properties(config) -> dict:
    """The Trainer's exec-properties (JSON-ready) for this config."""
    from pipeline.builder import build_components
    from pipeline.kubeflow.training_job.pods import trainer_pod

    [trainer] = [c for c in build_components(config, trainer_pod=trainer_pod(config))
                 if c.id == nodes.TRAINER]
    return {k: v for k, v in trainer.exec_properties.items() if v is not None}


def parse_overrides(items: List[str]) -> dict:
    import yaml

    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r} is not KEY=VALUE")
        overrides[key] = yaml.safe_load(value)
    return overrides


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.kubeflow.training_job.properties",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, required=True, help="the pipeline config YAML")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. training.batch_size=64 (a YAML value)")
    parser.add_argument("--output", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    from core.config import ConfigError, load_config

    try:
        config = load_config(args.config, parse_overrides(args.set))
    except (ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = json.dumps(trainer_exec_properties(config), indent=1, sort_keys=True)
    if args.output:
        args.output.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
