"""Start a pipeline from one CSV: a config with the columns' kinds inferred, a schema for review,
thresholds that fit the data, and the command to run next.

    python -m pipeline.init --csv FILE --label COLUMN [--task multiclass|binary|regression]
                            [--name NAME] [--span YYYYMMDD]
                            [--configs configs/] [--data data/] [--outputs outputs/]

Writes data/<name>/span-<YYYYMMDD>/<file> (a copy of FILE, the first dated span),
configs/<name>.yaml and configs/<name>.schema.pbtxt (TFDV's inferred schema, which the config's
schema_file points at), then prints the run command. Review both files before the first night:
the schema's domains are what the validation gate holds new data to.

Column kinds, from a sample of rows (the printout says, for each column, which it chose and why):
- numeric: every non-missing cell is a number the reader accepts (core/csv_cells.py: finite,
  within float32);
- list: text whose cells hold data.list_separator (--list-separator, default '|') in at least
  LIST_SHARE of the non-missing cells, with no empty value ('a||b', which the reader refuses);
  its elements are numeric when every one is such a number, else categorical; its fixed length
  is the LENGTH_PERCENTILE-th percentile of the lengths seen (at least 1), keeping the last
  values (the newest of a click history). A categorical list shares the vocabulary of an id
  column when at least VOCAB_SHARE of its values are that column's values (a click history of
  the items a candidate column holds); a categorical column it shares with becomes an id; else
  it has its own (`ids`). A numeric list of integers whose values are, by the same share, those
  of an integer column with more than ONE_HOT_MAX values holds ids too: both become ids, sharing
  the column's vocabulary (item ids written as numbers);
- ignored: a column with one value (or none), or one unique per row: more distinct values than
  UNIQUE_SHARE of its non-missing cells (a row id, a timestamp), which cannot generalize;
- id: other text with more than ONE_HOT_MAX distinct values (an item or user id: repeated, too
  many to one-hot), embedded: `features.ids` with a vocabulary of the top_k most frequent
  values (the distinct values seen and half as many again, rounded up to 1, 2 or 5 times a
  power of ten, for the ids later spans bring) and ID_OOV_BUCKETS for the rest;
- categorical: the rest.
With an id column that a list shares and a binary task, the config is the recommender's:
`model_module: two_tower`, `retrieval: {candidate: <the id column>, k: RETRIEVAL_K}` and the
two-tower hyper-parameters (TWO_TOWER_MODEL).

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
import copy
import csv
import datetime
import math
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
# A column with more distinct values than this share of its non-missing cells is unique per row
# (or nearly): ignored.
UNIQUE_SHARE = 0.9
# Text with more distinct values than this is an id (embedded), not a one-hot categorical.
ONE_HOT_MAX = 100
ID_OOV_BUCKETS = 8
# A text column is a list when at least this share of its non-missing cells hold the separator
# (a history of one value holds none).
LIST_SHARE = 0.3
LENGTH_PERCENTILE = 95
# A list shares an id column's vocabulary when at least this share of its values are that
# column's values.
VOCAB_SHARE = 0.5
RETRIEVAL_K = 10
# models/two_tower.py's build_model hyper-parameters as init writes them.
TWO_TOWER_MODEL = {"embedding_dim": 32, "tower_units": 64, "learning_rate": 0.005}
# The recommender's training (configs/recommender.yaml's, measured on data/clicks): larger batches
# and RECOMMENDER_EPOCHS passes over the training share of the rows, within RECOMMENDER_STEPS.
RECOMMENDER_TRAINING = {"batch_size": 256, "eval_steps": 50, "steps_per_execution": 10,
                        "shuffle_buffer": 8192}
RECOMMENDER_EPOCHS, RECOMMENDER_STEPS = 10, (500, 5000)


class InitError(ValueError):
    """A CSV or label that cannot start a pipeline; the message says what to do."""


@dataclass
class Columns:
    label: str
    numeric: List[str] = field(default_factory=list)
    categorical: List[str] = field(default_factory=list)
    ids: Dict[str, Dict[str, int]] = field(default_factory=dict)  # column -> features.ids entry
    lists: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # column -> features.lists
    ignored: Dict[str, str] = field(default_factory=dict)  # column -> why
    why: Dict[str, str] = field(default_factory=dict)  # every column but the label -> its kind
    classes: Dict[str, int] = field(default_factory=dict)  # label value -> rows
    rows: int = 0
    label_numeric: bool = False  # every present label cell is a number the reader accepts
    separator: str = "|"

    @property
    def label_sample(self) -> tasks.LabelSample:
        return tasks.LabelSample(self.label, self.classes, self.label_numeric)

    @property
    def candidate(self) -> Optional[str]:
        """The id column a list shares its vocabulary with (the items a history holds): what a
        recommender retrieves. The first, when several are."""
        shared = [s["vocabulary"] for s in self.lists.values() if s.get("vocabulary")]
        return shared[0] if shared else None


@dataclass
class TaskChoice:
    kind: str
    settings: Dict[str, Any] = field(default_factory=dict)  # the kind's, as the config writes them
    why: str = ""  # how it was chosen, printed


@dataclass
class _Cells:
    """What the sample shows of one column."""
    values: collections.Counter = field(default_factory=collections.Counter)
    numeric: bool = True  # every cell a number
    integer: bool = True  # every cell a number without a fraction
    present: int = 0  # non-missing cells
    with_separator: int = 0
    lengths: collections.Counter = field(default_factory=collections.Counter)  # as a list's
    elements: collections.Counter = field(default_factory=collections.Counter)
    elements_numeric: bool = True
    elements_integer: bool = True
    empty_elements: int = 0  # cells holding an empty value ("a||b", "a|")

    def add(self, cell: str, separator: str) -> None:
        self.present += 1
        self.values[cell] += 1
        # An empty cell is an empty list (when "" is no null marker): no length counted.
        elements = cell.split(separator) if cell else []
        if elements:
            self.lengths[len(elements)] += 1
        self.with_separator += len(elements) > 1
        self.empty_elements += "" in elements
        self.elements.update(elements)
        if self.numeric:
            self.numeric, integer = _number(cell)
            self.integer = self.integer and integer
            if len(elements) == 1:  # the element is the cell
                self.elements_numeric = self.elements_numeric and self.numeric
                self.elements_integer = self.elements_integer and integer
                return
        for element in elements:
            if not self.elements_numeric:
                return
            self.elements_numeric, integer = _number(element)
            self.elements_integer = self.elements_integer and integer


def _number(text: str) -> tuple:
    """(a number the reader accepts, one without a fraction)."""
    value, problem = number_problem(text)
    return problem is None, problem is None and float(value).is_integer()


def infer_columns(path: Path, label: str, null_markers: List[str], separator: str = "|"
                  ) -> Columns:
    """The kind of each column of a CSV file with a header line, from up to SAMPLE_ROWS rows (the
    module's docstring has the rules); Columns.why says, per column, which and why."""
    try:
        return _infer_columns(path, label, null_markers, separator)
    except UnicodeDecodeError:
        raise _not_utf8(path) from None
    except csv.Error as error:
        raise InitError(f"{path}: {error}: is a quote left open, or a cell over "
                        f"{csv.field_size_limit()} characters?") from None


def _not_utf8(path: Path) -> InitError:
    """Where the first bytes that are not UTF-8 are (the decoder's offsets are its buffer's)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as error:
                return InitError(
                    f"{path}, line {number}: bytes {raw[error.start:error.end]!r} at character "
                    f"{error.start + 1} are not UTF-8; save the file as UTF-8 (e.g. `iconv -f "
                    "latin1 -t utf-8`, naming the encoding it was written in)")
    return InitError(f"{path} is not UTF-8")


def _infer_columns(path: Path, label: str, null_markers: List[str], separator: str) -> Columns:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise InitError(f"{path} is empty: it needs a header line and rows")
        duplicated = sorted(c for c, n in collections.Counter(header).items() if n > 1)
        if duplicated:
            raise InitError(f"{path}: the header names {duplicated} more than once; give each "
                            "column its own name")
        if label not in header:
            raise InitError(f"{path}: no column '{label}' for the label; the columns are "
                            f"{header}")
        cells = {c: _Cells() for c in header}
        rows = 0
        for line, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise InitError(f"{path}, line {line}: {len(row)} cells for {len(header)} "
                                "columns")
            rows += 1
            for name, cell in zip(header, row, strict=True):
                if cell not in null_markers:
                    cells[name].add(cell, separator)
            if rows >= SAMPLE_ROWS:
                break
    if rows == 0:
        raise InitError(f"{path} has a header and no rows")
    columns = Columns(label=label, rows=rows, classes=dict(cells[label].values.most_common()),
                      label_numeric=cells[label].numeric, separator=separator)
    if len(columns.classes) < 2:
        raise InitError(f"{path}: the label '{label}' has {len(columns.classes)} value(s); "
                        "there is nothing to predict")
    for name in header:
        if name != label:
            _first_kind(columns, name, cells[name])
    _share_vocabularies(columns, cells)
    if not (columns.numeric or columns.categorical or columns.ids or columns.lists):
        raise InitError(f"{path}: no column besides '{label}' can be a feature "
                        f"({columns.ignored})")
    return columns


def _first_kind(columns: Columns, name: str, cells: _Cells) -> None:
    """The column's kind from its own cells (_share_vocabularies may revise it)."""
    distinct, separator = len(cells.values), columns.separator
    held = cells.with_separator / cells.present if cells.present else 0.0
    if distinct <= 1:
        _ignore(columns, name, "one value in every row" if distinct else "always missing")
    elif cells.numeric:
        columns.numeric.append(name)
        columns.why[name] = "numeric (every cell a number)"
    elif held >= LIST_SHARE and not cells.empty_elements:
        element = "numeric" if cells.elements_numeric else "categorical"
        length = max(1, _percentile(cells.lengths, LENGTH_PERCENTILE))
        columns.lists[name] = {"element": element, "length": length, "keep": "last"}
        columns.why[name] = (f"list of {element} ({held:.0%} of cells hold '{separator}'), "
                             f"length {length} ({LENGTH_PERCENTILE}th percentile), keeping the "
                             "last")
        if element == "categorical":
            columns.lists[name]["ids"] = _id_settings(len(cells.elements))
            columns.why[name] += f", own vocabulary of {len(cells.elements)} values"
    else:
        why = ""
        if cells.with_separator:
            why = (f"; {cells.empty_elements} cells hold an empty value between "
                   f"'{separator}' (a list refuses them)" if held >= LIST_SHARE else
                   f"; {held:.0%} of cells hold '{separator}', too few for a list")
        if distinct > UNIQUE_SHARE * cells.present:
            _ignore(columns, name, f"unique per row: {distinct} distinct values over "
                                   f"{cells.present} rows{why}")
        elif distinct > ONE_HOT_MAX:
            columns.ids[name] = _id_settings(distinct)
            columns.why[name] = (f"id ({distinct} distinct values over {cells.present} "
                                 f"rows){why}")
        else:
            columns.categorical.append(name)
            columns.why[name] = f"categorical ({distinct} distinct values){why}"


def _ignore(columns: Columns, name: str, why: str) -> None:
    columns.ignored[name] = why
    columns.why[name] = f"ignored ({why})"


def _share_vocabularies(columns: Columns, cells: Dict[str, _Cells]) -> None:
    """A list whose values are mostly those of an id column (or of a categorical column, which
    becomes an id; or, for a numeric list of integers, of an integer column with many values:
    both become ids) shares that column's vocabulary."""
    for name, settings in columns.lists.items():
        mine = cells[name]
        if settings["element"] == "categorical":
            candidates = [*columns.ids, *columns.categorical]
        elif mine.elements_integer:
            candidates = [c for c in columns.numeric
                          if cells[c].integer and len(cells[c].values) > ONE_HOT_MAX]
        else:
            continue
        total = sum(mine.elements.values())
        shares = {c: sum(n for v, n in mine.elements.items() if v in cells[c].values) / total
                  for c in candidates}
        best = max(shares, key=lambda c: shares[c], default=None)
        if best is None or shares[best] < VOCAB_SHARE:
            continue
        if best not in columns.ids:
            kind = "categorical" if best in columns.categorical else "numeric"
            getattr(columns, kind).remove(best)
            columns.ids[best] = {}
            columns.why[best] = (f"id ({len(cells[best].values)} distinct values over "
                                 f"{cells[best].present} rows; {kind} by its cells, but "
                                 f"{name} holds its values)")
        if settings["element"] == "numeric":
            settings["element"] = "categorical"
            columns.why[name] = columns.why[name].replace(
                "list of numeric", f"list of categorical (integers, ids of {best})", 1)
        settings.pop("ids", None)
        settings["vocabulary"] = best
        columns.why[name] = (columns.why[name].split(", own vocabulary")[0]
                             + f", shares {best}'s vocabulary ({shares[best]:.0%} of its values "
                             f"are {best} values)")
    for name in columns.ids:
        # The vocabulary the lists sharing it fill too.
        seen = set(cells[name].values).union(*(
            cells[list_name].elements for list_name, settings in columns.lists.items()
            if settings.get("vocabulary") == name))
        columns.ids[name] = _id_settings(len(seen))


def _id_settings(distinct: int) -> Dict[str, int]:
    """A vocabulary with room for the ids later spans bring: the distinct values seen and half as
    many again, rounded up to 1, 2 or 5 times a power of ten; ID_OOV_BUCKETS for the rest."""
    return {"top_k": _round_up(math.ceil(1.5 * distinct)), "oov_buckets": ID_OOV_BUCKETS}


def _round_up(n: int) -> int:
    power = 1
    while True:
        for step in (1, 2, 5):
            if step * power >= n:
                return step * power
        power *= 10


def _percentile(counts: collections.Counter, percent: int) -> int:
    """The nearest-rank percentile of the values counted."""
    rank, seen = math.ceil(percent / 100 * sum(counts.values())), 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    return 0


def recommender(columns: Columns, task: "TaskChoice") -> Optional[str]:
    """The candidate id column when the config is the two-tower recommender's: a binary task (a
    click) and an id column whose vocabulary a list (a history) shares."""
    return columns.candidate if task.kind == "binary" else None


def drop_user_ids(columns: Columns, candidate: str) -> None:
    """For the recommender: id columns other than the candidate that no list shares (a user id)
    are ignored. The history stands for the user, for users never seen too; an embedding per user
    learns from a few rows each and overfits (a generated log of 60,000 rows, 20 per user: AUC
    0.69 with the user id, 0.79 without)."""
    shared = {s.get("vocabulary") for s in columns.lists.values()}
    for name in [n for n in columns.ids if n != candidate and n not in shared]:
        del columns.ids[name]
        histories = ", ".join(n for n, s in columns.lists.items()
                              if s.get("vocabulary") == candidate)
        columns.ignored[name] = (f"an id no list shares, e.g. the user's: {histories} stands for "
                                 "the user in the recommender (an embedding per user overfits); "
                                 "move it to features.ids to try it")
        columns.why[name] = f"ignored ({columns.ignored[name]})"


def describe(columns: Columns, task: Optional["TaskChoice"] = None) -> List[str]:
    """The printout's lines: each column's kind and why, then the model when it is the
    recommender."""
    lines = [f"  {columns.label}: the label"]
    lines += [f"  {name}: {why}" for name, why in columns.why.items()]
    candidate = recommender(columns, task) if task else None
    if candidate:
        histories = [n for n, s in columns.lists.items() if s.get("vocabulary") == candidate]
        lines.append(f"model: two_tower, retrieving {candidate} (top {RETRIEVAL_K}): a binary "
                     f"label and {', '.join(histories)} sharing {candidate}'s vocabulary")
    return lines


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
    """The bundled config with this data's paths, columns, thresholds and names (the raw mapping
    init writes): the template's pipeline name in every path, and the experiment, becomes this
    one's; the model is the two-tower recommender where `recommender` says so."""
    raw = yaml.safe_load(template.read_text())
    raw = _renamed(raw, str(raw["pipeline_name"]), name)
    raw["pipeline_name"] = name
    raw["data"].update(input_base=_relative(data_dir, config_dir),
                       file_pattern="span-{YYYY}{MM}{DD}/*.csv", span_window=1,
                       list_separator=columns.separator)
    features: Dict[str, Any] = {"label": columns.label, "numeric": list(columns.numeric),
                                "categorical": list(columns.categorical)}
    if columns.ids:
        features["ids"] = copy.deepcopy(columns.ids)
    if columns.lists:
        features["lists"] = copy.deepcopy(columns.lists)
    features["ignored"] = list(columns.ignored)
    raw["features"] = features
    raw.pop("schema_file", None)  # until pipeline.schema has written it
    task = task or TaskChoice(tasks.DEFAULT_KIND)
    raw["task"] = {"kind": task.kind, **task.settings}
    candidate = recommender(columns, task)
    if candidate:
        raw = _with_keys_before(raw, "model", {"model_module": "two_tower"})
        raw["model"] = dict(TWO_TOWER_MODEL)
        raw = _with_keys_before(raw, "training", {
            "retrieval": {"candidate": candidate, "k": RETRIEVAL_K}})
        splits = raw["data"]["splits"]
        train_rows = columns.rows * splits["train"] / sum(splits.values())
        steps = math.ceil(RECOMMENDER_EPOCHS * train_rows / RECOMMENDER_TRAINING["batch_size"])
        raw["training"].update(RECOMMENDER_TRAINING, steps_per_epoch=None,
                               train_steps=min(max(steps, RECOMMENDER_STEPS[0]),
                                               RECOMMENDER_STEPS[1]))
    # Thresholds that fit the task and this data.
    raw["evaluation"]["thresholds"] = tasks.TASKS[task.kind].init_thresholds(columns.label_sample)
    raw["serving"]["model_name"] = name
    raw["runner"]["output_dir"] = _relative(outputs / name, config_dir)
    raw["serving"]["serving_dir"] = _relative(outputs / name / "serving", config_dir)
    raw.setdefault("kubeflow", {})["output_dir"] = _relative(outputs / name / "kubeflow",
                                                             config_dir)
    return raw


def _renamed(node: Any, old: str, new: str, key: str = "") -> Any:
    """node with `old` (the template's pipeline name), as a whole word, replaced by `new` in
    every path-like value (holding '/': paths, URIs, a beam argument's location) and in the
    Kubeflow experiment's name: gs://BUCKET/tfx/<old> -> gs://BUCKET/tfx/<new>."""
    if isinstance(node, dict):
        return {k: _renamed(v, old, new, f"{key}.{k}".lstrip(".")) for k, v in node.items()}
    if isinstance(node, list):
        return [_renamed(v, old, new, key) for v in node]
    if isinstance(node, str) and ("/" in node or key == "kubeflow.experiment"):
        return re.sub(rf"(?<![A-Za-z0-9_]){re.escape(old)}(?![A-Za-z0-9_])", new, node)
    return node


def _with_keys_before(raw: dict, before: str, keys: dict) -> dict:
    """raw with keys set, new ones placed before `before` (the written file's order)."""
    raw = {k: v for k, v in raw.items() if k not in keys}
    at = list(raw).index(before) if before in raw else len(raw)
    items = list(raw.items())
    return dict(items[:at] + list(keys.items()) + items[at:])


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
    parser.add_argument("--list-separator",
                        help="what separates a list cell's values (default: the template's "
                             "data.list_separator, '|')")
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
        separator = args.list_separator or template["data"].get("list_separator", "|")
        if not separator or separator in (",", '"', "\n", "\r"):
            raise InitError(f"--list-separator {separator!r}: choose one that is not CSV "
                            "syntax, e.g. '|'")
        columns = infer_columns(args.csv, args.label, template["data"]["null_markers"],
                                separator)
        task = infer_task(args.csv, columns, args.task)
        candidate = recommender(columns, task)
        if candidate:
            drop_user_ids(columns, candidate)
    except InitError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    span = data_dir / f"span-{args.span}"
    span.mkdir(parents=True)
    shutil.copy2(args.csv, span / args.csv.name)
    args.configs.mkdir(parents=True, exist_ok=True)
    raw = config_for(name, columns, data_dir, args.configs, args.outputs, task=task)
    write_config(config_path, raw, args.csv)
    print(f"{args.csv}: {columns.rows} rows; the columns' kinds:")
    for line in describe(columns, task):
        print(line)
    print(f"task {task.kind} ({task.why}); thresholds {raw['evaluation']['thresholds']}")
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
