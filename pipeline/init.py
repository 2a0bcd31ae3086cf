"""Start a pipeline from one CSV: a config with the columns' kinds inferred, a schema for review,
thresholds that fit the data, and the command to run next.

    python -m pipeline.init --csv FILE --label COLUMN [--task multiclass|binary|regression]
                            [--name NAME] [--span YYYYMMDD]
                            [--configs configs/] [--data data/] [--outputs outputs/]

Writes data/<name>/span-<YYYYMMDD>/<file> (a copy of FILE, the first dated span),
configs/<name>.yaml and configs/<name>.schema.pbtxt (TFDV's inferred schema, which the config's
schema_file points at), then prints the run command. Review both files before the first night:
the schema's domains are what the validation gate holds new data to.

Column kinds, from a sample of rows: a column whose every non-missing cell is a number the reader
accepts (core/csv_cells.py: finite, within float32) is numeric; other columns are categorical,
except ones that cannot generalize (an id-like column with a distinct value in most rows, or a
column with one value), which are listed under `ignored`.

The task, from the label (--task overrides it; core/tasks.py has each kind's rule): a numeric
label with more than MAX_NUMERIC_CLASSES distinct values, or with fractions, is a regression; a
label with exactly two values is binary, the positive class being the value that reads as yes
(POSITIVE_WORDS: "1", "true", "yes", ...; case ignored) when exactly one does, else the less
frequent value (on a tie, the later in sorted order); any other label is multiclass. The
thresholds fit the task:
- multiclass: SparseCategoricalAccuracy at least the most frequent class's share (what always
  answering that class scores);
- binary: AUC at least BINARY_AUC_FLOOR (0.5 is chance);
- regression: MeanAbsoluteError at most the label's mean absolute deviation from its median
  (what always answering the median scores);
each also against the model serving (max_decrease / max_increase).
"""
from __future__ import annotations

import argparse
import collections
import csv
import datetime
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

import pipeline  # (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

pipeline.quiet_cli()

from core import tasks  # noqa: E402
from core.config import DEFAULT_CONFIG  # noqa: E402
from core.csv_cells import number_problem  # noqa: E402

REPO = DEFAULT_CONFIG.parent.parent
SAMPLE_ROWS = 100_000
# A categorical column with more distinct values than this share of its rows is an id.
ID_SHARE = 0.5


class InitError(ValueError):
    """A CSV or label that cannot start a pipeline; the message says what to do."""


@dataclass
class Columns:
    label: str
    numeric: List[str] = field(default_factory=list)
    categorical: List[str] = field(default_factory=list)
    ignored: Dict[str, str] = field(default_factory=dict)  # column -> why
    classes: Dict[str, int] = field(default_factory=dict)  # label value -> rows
    rows: int = 0
    label_numeric: bool = False  # every present label cell is a number the reader accepts

    @property
    def label_sample(self) -> tasks.LabelSample:
        return tasks.LabelSample(self.label, self.classes, self.label_numeric)


@dataclass
class TaskChoice:
    kind: str
    settings: Dict[str, Any] = field(default_factory=dict)  # the kind's, as the config writes them
    why: str = ""  # how it was chosen, printed


def infer_columns(path: Path, label: str, null_markers: List[str]) -> Columns:
    """The kind of each column of a CSV file with a header line, from up to SAMPLE_ROWS rows."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise InitError(f"{path} is empty: it needs a header line and rows")
        duplicated = sorted({c for c in header if header.count(c) > 1})
        if duplicated:
            raise InitError(f"{path}: the header names {duplicated} more than once; give each "
                            "column its own name")
        if label not in header:
            raise InitError(f"{path}: no column '{label}' for the label; the columns are "
                            f"{header}")
        values: Dict[str, collections.Counter] = {c: collections.Counter() for c in header}
        numeric = {c: True for c in header}
        rows = 0
        for line, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise InitError(f"{path}, line {line}: {len(row)} cells for {len(header)} "
                                "columns")
            rows += 1
            for name, cell in zip(header, row, strict=True):
                if cell in null_markers:
                    continue
                values[name][cell] += 1
                numeric[name] = numeric[name] and number_problem(cell)[1] is None
            if rows >= SAMPLE_ROWS:
                break
    if rows == 0:
        raise InitError(f"{path} has a header and no rows")
    columns = Columns(label=label, rows=rows, classes=dict(values[label].most_common()),
                      label_numeric=numeric[label])
    if len(columns.classes) < 2:
        raise InitError(f"{path}: the label '{label}' has {len(columns.classes)} value(s); "
                        "there is nothing to predict")
    for name in header:
        if name == label:
            continue
        distinct = len(values[name])
        if distinct <= 1:
            columns.ignored[name] = "one value in every row" if distinct else "always missing"
        elif numeric[name]:
            columns.numeric.append(name)
        elif distinct > ID_SHARE * rows:
            columns.ignored[name] = f"{distinct} distinct values in {rows} rows (an id?)"
        else:
            columns.categorical.append(name)
    if not columns.numeric and not columns.categorical:
        raise InitError(f"{path}: no column besides '{label}' can be a feature "
                        f"({columns.ignored})")
    return columns


def infer_task(path: Path, columns: Columns, requested: Optional[str] = None) -> TaskChoice:
    """The task for this label (the module's docstring has the rules); `requested` (--task)
    overrides the inferred kind, checked against the values."""
    label = columns.label_sample
    kind = requested or tasks.infer_kind(label)
    try:
        settings, why = tasks.TASKS[kind].fit_label(label, "--task" if requested else "inferred")
    except tasks.LabelMismatch as error:
        raise InitError(f"{path}: {error}") from None
    return TaskChoice(kind, settings, why)


def config_for(name: str, columns: Columns, data_dir: Path, config_dir: Path,
               outputs: Path = REPO / "outputs", template: Path = DEFAULT_CONFIG,
               task: Optional[TaskChoice] = None) -> dict:
    """The bundled config with this data's paths, columns, thresholds and names."""
    raw = yaml.safe_load(template.read_text())
    raw["pipeline_name"] = name
    raw["data"].update(input_base=_relative(data_dir, config_dir),
                       file_pattern="span-{YYYY}{MM}{DD}/*.csv", span_window=1)
    raw["features"] = {"label": columns.label, "numeric": columns.numeric,
                       "categorical": columns.categorical, "ignored": list(columns.ignored)}
    raw.pop("schema_file", None)  # until pipeline.schema has written it
    task = task or TaskChoice(tasks.DEFAULT_KIND)
    raw["task"] = {"kind": task.kind, **task.settings}
    # Thresholds that fit the task and this data.
    raw["evaluation"]["thresholds"] = tasks.TASKS[task.kind].init_thresholds(columns.label_sample)
    raw["serving"]["model_name"] = name
    raw["runner"]["output_dir"] = _relative(outputs / name, config_dir)
    raw["serving"]["serving_dir"] = _relative(outputs / name / "serving", config_dir)
    kubeflow = raw.get("kubeflow", {})
    kubeflow["output_dir"] = _relative(outputs / name / "kubeflow", config_dir)
    if kubeflow.get("input_base"):  # the same span folders in the cluster's bucket
        kubeflow["input_base"] = f"{kubeflow['input_base'].rsplit('/', 1)[0]}/{name}"
    return raw


def _relative(path: Path, start: Path) -> str:
    return os.path.relpath(path.resolve(), start.resolve())


def write_config(path: Path, raw: dict, source: Path) -> None:
    path.write_text(f"# Written by `python -m pipeline.init` from {source.name}; every key is "
                    "explained in configs/pipeline.yaml.\n" + yaml.safe_dump(raw, sort_keys=False))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.init", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, required=True, help="the data, with a header line")
    parser.add_argument("--label", required=True, help="the column to predict")
    parser.add_argument("--task", choices=tasks.KINDS,
                        help="what to predict (default: inferred from the label, see above)")
    parser.add_argument("--name", help="pipeline and model name (default: the file's name)")
    parser.add_argument("--span", default=datetime.date.today().strftime("%Y%m%d"),
                        help="the first span's date, YYYYMMDD (default: today)")
    parser.add_argument("--configs", type=Path, default=REPO / "configs",
                        help="where the config and schema go (default: configs/)")
    parser.add_argument("--data", type=Path, default=REPO / "data",
                        help="where the data's span folders go (default: data/)")
    parser.add_argument("--outputs", type=Path, default=REPO / "outputs",
                        help="where the pipeline's runs write (default: outputs/<name>/)")
    args = parser.parse_args(argv)
    name = args.name or re.sub(r"[^a-z0-9-_]+", "-", args.csv.stem.lower()).strip("-_")
    config_path = args.configs / f"{name}.yaml"
    data_dir = args.data / name
    try:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-_]*", name):
            raise InitError(f"--name '{name}': use lower case letters, digits, '-' and '_'")
        if not re.fullmatch(r"\d{8}", args.span):
            raise InitError(f"--span '{args.span}': give the date as YYYYMMDD")
        if not args.csv.is_file():
            raise InitError(f"--csv {args.csv}: no such file")
        for existing in (config_path, data_dir):
            if existing.exists():
                raise InitError(f"{existing} exists; pick another --name or remove it")
        template = yaml.safe_load(DEFAULT_CONFIG.read_text())
        columns = infer_columns(args.csv, args.label, template["data"]["null_markers"])
        task = infer_task(args.csv, columns, args.task)
    except InitError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    span = data_dir / f"span-{args.span}"
    span.mkdir(parents=True)
    shutil.copy2(args.csv, span / args.csv.name)
    args.configs.mkdir(parents=True, exist_ok=True)
    raw = config_for(name, columns, data_dir, args.configs, args.outputs, task=task)
    write_config(config_path, raw, args.csv)
    print(f"{args.csv}: {columns.rows} rows; label '{columns.label}'; numeric "
          f"{columns.numeric}; categorical {columns.categorical}")
    print(f"task {task.kind} ({task.why}); thresholds {raw['evaluation']['thresholds']}")
    for column, why in columns.ignored.items():
        print(f"  ignored '{column}': {why}")
    print(f"wrote {config_path} and copied the data to {span}/")
    from pipeline import schema

    schema_path = args.configs / f"{name}.schema.pbtxt"
    if schema.main(["--config", str(config_path), "--output", str(schema_path)]) != 0:
        return 1
    write_config(config_path, {**raw, "schema_file": schema_path.name}, args.csv)
    print(f"\nReview {schema_path} (domains, presence) and the thresholds in {config_path}, "
          f"then run:\n  python -m pipeline.run --config {config_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
