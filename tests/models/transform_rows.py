"""Runs Transform's preprocessing_fn (components/transform.py: the user's features and the task's
label) through real TFT (Beam) on a few rows, for unit tests.

The rows bring their own features and raw schema: the unit tests do not read configs/, so a fork
that replaces the bundled example keeps them passing."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from core.config import FeaturesConfig, PreprocessingConfig, TaskConfig
from tests.helpers import read_as

ROWS = """species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year
Adelie,Torgersen,39.1,18.7,181,3750,male,2007
Adelie,Dream,NA,NA,NA,NA,NA,2007
Gentoo,Biscoe,46.1,13.2,211,4500,female,2007
Gentoo,Biscoe,50.0,16.3,230,5700,male,2007
Chinstrap,Dream,46.5,17.9,192,3500,female,2007
Chinstrap,Dream,50.0,19.5,196,3900,male,2007
"""

FEATURES = FeaturesConfig(
    label="species",
    numeric=["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"],
    categorical=["island", "sex"], ignored=["year"])


def custom_config() -> dict:
    """What pipeline.builder.model_code_config gives Transform and Trainer, for these rows."""
    return {"features": FEATURES.model_dump(mode="json"),
            "task": TaskConfig().model_dump(mode="json"),
            "preprocessing": PreprocessingConfig().model_dump(mode="json")}


def raw_examples(text: str = ROWS) -> list:
    from components.example_gen.csv_reader import parse_csv

    return list(parse_csv("rows.csv", text, read_as(FEATURES), ["NA", ""]))


def raw_instances(text: str = ROWS) -> list:
    """Instance dicts in TFT's format: each feature a list, empty when missing."""
    instances = []
    for example in raw_examples(text):
        row = {}
        for name, feature in example.features.feature.items():
            row[name] = list(feature.float_list.value or feature.bytes_list.value)
        instances.append(row)
    schema = raw_schema()
    for row in instances:
        for feature in schema.feature:
            row.setdefault(feature.name, [])
    return instances


def raw_schema() -> schema_pb2.Schema:
    """The rows' raw schema as ImportSchemaGen or SchemaGen gives it: one value per feature, no
    fixed shape (missing values allowed)."""
    kinds = {**{n: "FLOAT" for n in FEATURES.numeric},
             **{n: "BYTES" for n in [FEATURES.label, *FEATURES.categorical]}}
    return text_format.Parse("".join(
        f'feature {{ name: "{name}" type: {kind} value_count {{ min: 1 max: 1 }} }}\n'
        for name, kind in sorted(kinds.items())), schema_pb2.Schema())


def analyze_and_transform(folder: Path, custom: Optional[dict] = None, text: str = ROWS):
    """(transformed rows, TFTransformOutput) for ROWS (or `text`, in ROWS' columns), with the
    bundled config's model code config (or `custom`: another task or label)."""
    from components.transform import preprocessing_fn

    fn = functools.partial(preprocessing_fn, custom_config=custom or custom_config())
    return run_transform(folder, fn, raw_instances(text), raw_schema())


def run_transform(folder: Path, fn, instances: list, schema: schema_pb2.Schema):
    """(transformed rows, TFTransformOutput) of `fn` over instances (TFT's instance dicts) with
    this raw schema, through real TFT on Beam."""
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io

    metadata = dataset_metadata.DatasetMetadata(schema)
    with tft_beam.Context(temp_dir=str(folder / "tmp"), force_tf_compat_v1=False):
        (transformed, _), transform_fn = (
            (instances, metadata) | tft_beam.AnalyzeAndTransformDataset(
                fn, output_record_batches=False))
        _ = transform_fn | tft_beam.WriteTransformFn(str(folder / "transform_graph"))
    # TFX's Transform also records the raw schema; the serving signatures parse with it.
    metadata_io.write_metadata(
        metadata, str(folder / "transform_graph" / tft.TFTransformOutput.RAW_METADATA_DIR))
    return transformed, tft.TFTransformOutput(str(folder / "transform_graph"))
