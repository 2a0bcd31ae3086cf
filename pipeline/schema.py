"""Writes the schema TFDV infers from the data to configs/ for review.

    python -m pipeline.schema [--config configs/pipeline.yaml] [--output configs/schema.pbtxt]

It runs the pipeline's first steps (ExampleGen, StatisticsGen, SchemaGen) with the same config and
metadata store, so a later full run reuses their cached results. Review the result before you point
`schema_file` at it: tighten domains and presence, which is what makes the validation gate useful.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pipeline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from core import nodes
from core.cli import add_config_argument, refuse
from core.config import ConfigError, load_config, with_changes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.schema", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_argument(parser)
    parser.add_argument("--output", type=Path, default=None,
                        help="where to write the schema (default: schema.pbtxt beside the config)")
    args = parser.parse_args(argv)
    try:
        config = with_changes(load_config(args.config), schema_file=None)
    except ConfigError as error:
        return refuse(error)
    from tfx.orchestration import metadata
    from tfx.orchestration import pipeline as tfx_pipeline
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    from pipeline.builder import build_components

    steps = {step.id: step for step in build_components(config)}
    first_steps = [steps[nodes.EXAMPLE_GEN], steps[nodes.STATISTICS_GEN], steps[nodes.SCHEMA_GEN]]
    LocalDagRunner().run(tfx_pipeline.Pipeline(
        pipeline_name=config.pipeline_name, pipeline_root=str(config.pipeline_root),
        components=first_steps, enable_cache=config.runner.enable_cache,
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            str(config.metadata_path)),
        beam_pipeline_args=config.runner.beam_args))
    from components.run_report.mlmd import latest_output_uri
    from pipeline.report import open_store

    source = Path(latest_output_uri(open_store(str(config.metadata_path)),
                                    *nodes.INFERRED_SCHEMA))
    output = args.output or args.config.resolve().parent / "schema.pbtxt"
    shutil.copyfile(source / "schema.pbtxt", output)
    print(f"wrote the inferred schema to {output}; review it, then set `schema_file` in the config")
    return 0


if __name__ == "__main__":
    sys.exit(main())
