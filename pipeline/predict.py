"""Sends CSV rows to TF Serving's REST API and prints each row's prediction, or its top-k items.

    python -m pipeline.predict --url http://localhost:8501 --csv rows.csv
    python -m pipeline.predict --grpc localhost:8500 --csv rows.csv     (gRPC: predict_grpc.py)
        [--model penguins] [--signature raw_features] [--config configs/pipeline.yaml]
        [--batch-size 64] [--batching-config deploy/serving/config/batching.config]
        [--log-requests DIR [--log-sample-rate 1.0]]

The CSV has the columns of the training data (data/penguins/*/penguins.csv); the label and the
config's ignored columns may be present and are dropped. Every row is checked against the config's
features before anything is sent, numbers against float32's range. A list column's cell
(features.lists) holds its values separated by data.list_separator (`sku1|sku2`), sent as a JSON
list; an empty cell is an empty list. Output: one line per row, by the config's task.kind:
  multiclass  `row N (line L): <class> <probability of that class>`
  binary      `row N (line L): <class> p(<positive class>)=<probability of the positive class>`
  regression  `row N (line L): <value>`
With `--signature retrieve` (a config with `retrieval:`, the two-tower recommender), the rows are
queries (every model input but the candidate column, which may be present and is dropped) and
each line is the k items `retrieve` ranks best, best first:
  retrieve    `row N (line L): <item> (<score>), <item> (<score>), ...`

The rows go in requests of --batch-size rows, at most the server's max_batch_size: TF Serving
refuses a larger request (large-batch splitting is off), so a larger --batch-size is split into
requests of max_batch_size rows, said once on stderr. The limit is read from the batching config
the deploy gives tensorflow_model_server (--batching_parameters_file; --batching-config, default
deploy/serving/config/batching.config, used when it exists; `none` for a server without
--enable_batching).

--log-requests DIR writes the rows sent (a --log-sample-rate share of them) as serving-span CSV
files, DIR/span-YYYYMMDD/predict-<time>-<pid>.csv (pipeline/predict_log.py; core/serving_log.py's
layout, the label absent): the serving span the nightly skew check compares with training.

Exit status: 0 done; 1 the server could not be reached or answered with an error; 2 unusable input
(config, CSV file, a cell).
"""
from __future__ import annotations

import argparse
import base64
import csv
import dataclasses
import io
import json
import math
import re
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Set, Union

import requests

from core import tasks
from core.cli import add_config_argument, refuse
from core.config import ConfigError, FeaturesConfig, TaskConfig, load_config
from core.csv_cells import list_values, number

RAW_FEATURES = "raw_features"
SERVING_DEFAULT = "serving_default"
# The prediction signatures of components/trainer/export.py (PREDICT_SIGNATURES), and its
# top-k signature (RETRIEVE); not imported from there because that module loads TensorFlow,
# which a client does not need for raw_features.
SIGNATURES = (RAW_FEATURES, SERVING_DEFAULT)
RETRIEVE = "retrieve"
# The deploy's batching config (deploy/serving/compose and k8s mount it as the server's
# --batching_parameters_file), relative to the repository root.
BATCHING_CONFIG = Path("deploy/serving/config/batching.config")
# BatchingParameters without max_batch_size: TF's SharedBatchScheduler QueueOptions default
# (input_batch_size_limit = 1000; tensorflow_serving/servables/tensorflow/bundle_factory_util.h
# GetQueueOptions sets it only from max_batch_size).
DEFAULT_MAX_BATCH_SIZE = 1000
_MAX_BATCH_SIZE = re.compile(r"\bmax_batch_size\s*:?\s*\{\s*value\s*:\s*(\d+)\s*\}")

# One value (missing: NaN or ""), or a list feature's values (an empty list: none).
Value = Union[float, str, List[float], List[str]]


class InputError(ValueError):
    """A CSV file that cannot be sent; the message names the file, line, column and value."""


class ServingError(RuntimeError):
    """TF Serving could not be reached or did not answer with predictions."""


@dataclasses.dataclass(frozen=True)
class Row:
    line: int                    # line in the CSV file, header = 1
    # every input sent; missing = NaN (numeric) or "" (text); a list feature: its values
    values: Dict[str, Value]


def read_rows(path: Path, features: FeaturesConfig, null_markers: Sequence[str],
              list_separator: str = "|", inputs: Optional[Sequence[str]] = None) -> List[Row]:
    """The rows of a CSV file, typed and complete; raises InputError on the first unusable cell.
    inputs: the columns to send (default every model input; `retrieve` takes query_inputs)."""
    inputs = list(features.model_inputs if inputs is None else inputs)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # -sig: tolerate a spreadsheet's BOM
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read {path}: {error}") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [h.strip() for h in next(reader, [])]
    if not any(header):
        raise InputError(f"{path} is empty: it needs a header line and at least one row")
    _check_header(path, header, features, inputs)
    numeric, nulls = set(features.numeric), set(null_markers)
    rows = []
    for row in reader:
        line = reader.line_num
        if not row:
            continue
        if len(row) != len(header):
            raise InputError(f"{path}, line {line}: {len(row)} cells where the header has "
                             f"{len(header)}")
        cells = dict(zip(header, row, strict=True))
        values: Dict[str, Value] = {}
        for name in inputs:
            cell = cells[name]
            if name in features.lists:
                values[name] = _list_values(cell, features.lists[name].element, list_separator,
                                            nulls, path, line, name)
            elif name not in numeric:
                values[name] = "" if cell in nulls else cell
            elif cell in nulls:
                values[name] = math.nan
            else:
                values[name] = _number(cell, path, line, name)
        rows.append(Row(line, values))
    if not rows:
        raise InputError(f"{path} has a header but no rows")
    return rows


def _list_values(cell: str, element: str, separator: str, nulls: Set[str], path: Path,
                 line: int, column: str) -> list:
    """A list cell's values as the pipeline's reader reads them (core/csv_cells.list_values); a
    null marker is an empty list too."""
    if cell in nulls:
        return []
    values, problem = list_values(cell, element, separator)
    if problem is not None:
        raise InputError(f"{path}, line {line}, column '{column}': {problem}")
    return values


def _check_header(path: Path, header: List[str], features: FeaturesConfig,
                  inputs: Sequence[str]) -> None:
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise InputError(f"{path}: column(s) {duplicated} appear more than once in the header")
    missing = [name for name in inputs if name not in header]
    if missing:
        raise InputError(f"{path}: missing feature column(s) {missing}; the model needs "
                         f"{list(inputs)}")
    unknown = [h for h in header if h not in features.columns]
    if unknown:
        raise InputError(f"{path}: unknown column(s) {unknown}; expected the features "
                         f"{list(inputs)}, optionally the label '{features.label}' and "
                         f"the ignored columns {features.ignored}")


def query_inputs(config) -> List[str]:
    """What `retrieve` takes: every model input but the retrieval candidate (models/features.py
    FeatureSpec.query_inputs)."""
    if config.retrieval is None:
        raise InputError("the config has no `retrieval:` section, so its model has no "
                         f"'{RETRIEVE}' signature; choose {' or '.join(SIGNATURES)}")
    return [name for name in config.features.model_inputs
            if name != config.retrieval.candidate]


def _number(cell: str, path: Path, line: int, column: str) -> float:
    # The reader of the training data applies the same policy (core/csv_cells.py): NaN and
    # infinity are refused, and so is what float32 (the model's inputs; TF Serving casts any
    # JSON number to float, tensorflow_serving/util/json_tensor.cc) turns into infinity.
    return number(cell, path, line, column, InputError)


def build_request(rows: Sequence[Mapping[str, Value]], features: FeaturesConfig,
                  signature: str = RAW_FEATURES, inputs: Optional[Sequence[str]] = None) -> dict:
    """TF Serving's REST predict body ("instances", row format) for one batch of typed rows.

    raw_features (and retrieve, on `inputs`: the query's) takes one named input per feature;
    a list feature's is [batch, values]: TF Serving batches the rows' lists into one tensor and
    refuses lists of unequal length in one request (json_tensor.cc AddInstanceItem), so each is
    padded with "" (text) or NaN (numbers), which the model reads as absent, to the request's
    longest (at least 1). serving_default takes serialized tf.Examples, sent base64-encoded (a
    missing value is left out of the example, as in training).
    """
    if signature in (RAW_FEATURES, RETRIEVE):
        names = list(features.model_inputs if inputs is None else inputs)
        instances = [{name: row[name] for name in names} for row in rows]
        for name in names:
            if name in features.lists:
                pad = math.nan if features.lists[name].element == "numeric" else ""
                width = max([len(row[name]) for row in rows] + [1])
                for instance, row in zip(instances, rows, strict=True):
                    instance[name] = list(row[name]) + [pad] * (width - len(row[name]))
    elif signature == SERVING_DEFAULT:
        instances = [{"b64": base64.b64encode(example).decode()}
                     for example in _serialized_examples(rows, features)]
    else:
        raise ValueError(f"unknown signature {signature!r}; choose one of "
                         f"{(*SIGNATURES, RETRIEVE)}")
    return {"signature_name": signature, "instances": instances}


def _serialized_examples(rows: Sequence[Mapping[str, Value]], features: FeaturesConfig
                         ) -> List[bytes]:
    from tensorflow.core.example import example_pb2  # only here: importing TF takes seconds

    numeric = set(features.numeric)
    serialized = []
    for row in rows:
        example = example_pb2.Example()
        for name in features.model_inputs:
            value = row[name]
            if name in features.lists:  # present, its values (none: an empty list), as read
                feature = example.features.feature[name]
                if features.lists[name].element == "numeric":
                    feature.float_list.value.extend(value)
                else:
                    feature.bytes_list.value.extend(v.encode() for v in value)
            elif name in numeric and not math.isnan(value):
                example.features.feature[name].float_list.value.append(value)
            elif name not in numeric and value != "":
                example.features.feature[name].bytes_list.value.append(value.encode())
        serialized.append(example.SerializeToString())
    return serialized


def predict(url: str, model: str, body: dict, timeout: float) -> List[dict]:
    """POSTs one predict request; returns its `predictions`, one per instance."""
    endpoint = f"{url.rstrip('/')}/v1/models/{model}:predict"
    try:
        # json.dumps writes NaN for a missing number: TF Serving's JSON parser accepts it,
        # requests' own json= encoder refuses it.
        answer = requests.post(endpoint, data=json.dumps(body), timeout=timeout,
                               headers={"Content-Type": "application/json"})
    except requests.Timeout:
        raise ServingError(f"TF Serving at {endpoint} did not answer within {timeout:g} s"
                           ) from None
    except requests.RequestException as error:
        raise ServingError(f"cannot reach TF Serving at {endpoint}: {_reason(error)}; is the "
                           "server running? (deploy/serving/README.md)") from None
    try:
        content = answer.json()
    except ValueError:
        content = None
    if answer.status_code != 200:
        detail = content.get("error") if isinstance(content, dict) else None
        raise ServingError(f"TF Serving at {endpoint} answered {answer.status_code}: "
                           f"{detail or answer.text[:300].strip() or answer.reason}")
    predictions = content.get("predictions") if isinstance(content, dict) else None
    if not isinstance(predictions, list) or len(predictions) != len(body["instances"]):
        raise ServingError(f"TF Serving at {endpoint} answered without one prediction per row: "
                           f"{answer.text[:300].strip()}")
    return predictions


def max_batch_size(path: Path) -> int:
    """The most instances one request may hold, by a BatchingParameters text proto (the file
    tensorflow_model_server reads with --batching_parameters_file): its max_batch_size, or the
    server's default when it has none. The server refuses a larger request, "Task size <n> is
    larger than maximum input batch size <max>" (bundle_factory_util.h GetQueueOptions makes it
    the queue's input_batch_size_limit; large-batch splitting, off in the deploy, would only
    split what it runs, not raise that limit). Raises
    InputError naming the file when it cannot be read or its max_batch_size not understood."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read the batching config {path}: {error}") from None
    text = re.sub(r"#[^\n]*", "", text)
    found = _MAX_BATCH_SIZE.findall(text)
    if "max_batch_size" in text and len(found) != 1:
        raise InputError(f"{path}: cannot read max_batch_size (expected one "
                         "`max_batch_size { value: N }`)")
    limit = int(found[0]) if found else DEFAULT_MAX_BATCH_SIZE
    if limit < 1:
        raise InputError(f"{path}: max_batch_size {limit} must be at least 1")
    return limit


def request_size(batch_size: int, batching_config: Optional[Path]) -> int:
    """Rows per request: batch_size, at most the batching config's max_batch_size (None: no
    config, no limit). Says on stderr when it splits."""
    if batching_config is None:
        return batch_size
    limit = max_batch_size(batching_config)
    if batch_size > limit:
        print(f"note: --batch-size {batch_size} is above max_batch_size {limit} in "
              f"{batching_config}, and TF Serving refuses a larger request: sending requests "
              f"of {limit} rows", file=sys.stderr)
        return limit
    return batch_size


def _reason(error: Exception) -> str:
    """'Connection refused' rather than urllib3's three nested exception reprs."""
    match = re.search(r"\[Errno -?\d+\] ([^'\"\)]+)", str(error))
    return match.group(1).strip() if match else type(error).__name__


def format_prediction(number: int, row: Row, prediction: Mapping, task: TaskConfig) -> str:
    """One output line; raises ServingError when the answer is not the task's (a model of
    another task kind, or another config)."""
    kind = tasks.TASKS[task.kind]  # what the client knows of the task's kind
    outputs = kind.outputs
    if len(outputs) == 1 and not isinstance(prediction, Mapping):
        # TF Serving names no output when a signature has one (json_tensor.cc at 2.16.1,
        # MakeRowFormatJsonFromTensors): a regression's row is its value.
        prediction = {outputs[0]: prediction}
    try:
        answer = kind.answer(prediction, task.settings)
    except (KeyError, TypeError, ValueError):
        raise ServingError(f"a prediction lacks {' or '.join(outputs)}, which a "
                           f"task.kind {task.kind} model returns (is the served model the "
                           f"config's?): {prediction}") from None
    return f"row {number} (line {row.line}): {answer}"


def format_retrieved(number: int, row: Row, prediction: Mapping) -> str:
    """One `retrieve` output line, best item first; raises ServingError when the answer is not
    `retrieve`'s (item_ids and scores, k each)."""
    try:
        items, scores = prediction["item_ids"], prediction["scores"]
        ranked = ", ".join(f"{item} ({float(score):.3f})"
                           for item, score in zip(items, scores, strict=True))
    except (KeyError, TypeError, ValueError):
        raise ServingError(f"a prediction lacks item_ids and scores (k each), which "
                           f"'{RETRIEVE}' returns (is the served model the config's?): "
                           f"{prediction}") from None
    return f"row {number} (line {row.line}): {ranked}"


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline.predict", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    server = parser.add_mutually_exclusive_group(required=True)
    server.add_argument("--url", help="TF Serving's REST address, e.g. http://localhost:8501")
    server.add_argument("--grpc", metavar="HOST:PORT", help="TF Serving's gRPC address instead, "
                        "e.g. localhost:8500: the same rows, checks and lines (loads TensorFlow)")
    parser.add_argument("--csv", required=True, type=Path, help="rows to classify")
    parser.add_argument("--model", help="model name (default: the config's serving.model_name)")
    parser.add_argument("--signature", choices=(*SIGNATURES, RETRIEVE), default=RAW_FEATURES,
                        help="raw_features: named JSON values (default); serving_default: "
                        "base64 tf.Examples (loads TensorFlow); retrieve: each row's top-k "
                        "items (a config with `retrieval:`)")
    add_config_argument(parser, help="pipeline config YAML: features, null markers, model name")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="rows per request (default 64); above the server's max_batch_size "
                        "it is split into requests of max_batch_size rows")
    parser.add_argument("--batching-config", default=None,
                        help="the server's BatchingParameters file, whose max_batch_size caps "
                        f"the rows per request (default {BATCHING_CONFIG}, when it exists; "
                        "`none`: no limit, for a server without --enable_batching)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    parser.add_argument("--log-requests", type=Path, metavar="DIR",
                        help="write the rows sent as serving-span CSV files under DIR "
                        "(span-YYYYMMDD/), for the skew check")
    parser.add_argument("--log-sample-rate", type=float, default=1.0,
                        help="the share of rows --log-requests writes, drawn per row "
                        "(default 1: every row)")
    args = parser.parse_args(argv)
    if not 0.0 <= args.log_sample_rate <= 1.0:
        parser.error("--log-sample-rate must be in [0, 1]")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    if args.batching_config is None:
        args.batching_config = BATCHING_CONFIG if BATCHING_CONFIG.is_file() else None
    elif args.batching_config.lower() == "none":
        args.batching_config = None
    else:
        args.batching_config = Path(args.batching_config)
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        # TensorFlow-free: the client starts in well under a second.
        config = load_config(args.config)
        inputs = query_inputs(config) if args.signature == RETRIEVE else None
        rows = read_rows(args.csv, config.features, config.data.null_markers,
                         config.data.list_separator, inputs)
        batch_size = request_size(args.batch_size, args.batching_config)
    except (ConfigError, InputError) as error:
        return refuse(error)
    model = args.model or config.serving.model_name
    request_log = _request_log(args, config)
    try:
        code = _send(args, config, rows, batch_size, inputs, model, request_log)
    finally:
        logged = request_log is None or _write_log(request_log)
    return code if code or logged else 2


def _send(args: argparse.Namespace, config, rows: List[Row], batch_size: int,
          inputs: Optional[List[str]], model: str, request_log) -> int:
    """Sends the rows in batches and prints each answer; 1 when TF Serving failed."""
    try:
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            body = build_request([row.values for row in batch], config.features, args.signature,
                                 inputs)
            if args.grpc:
                from pipeline import predict_grpc

                try:
                    predictions = predict_grpc.predict(args.grpc, model, body, args.timeout)
                except predict_grpc.ServingError as error:
                    raise ServingError(str(error)) from None
            else:
                predictions = predict(args.url, model, body, args.timeout)
            if request_log is not None:  # what the model was asked and answered
                request_log.add([row.values for row in batch])
            for offset, (row, prediction) in enumerate(zip(batch, predictions, strict=True)):
                number = start + offset + 1
                print(format_retrieved(number, row, prediction) if args.signature == RETRIEVE
                      else format_prediction(number, row, prediction, config.task), flush=True)
    except ServingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def _write_log(request_log) -> bool:
    """Writes --log-requests' files (what was answered, before an error too); False, said on
    stderr, when the folder cannot take them."""
    try:
        for path in request_log.close():
            print(f"logged the rows sent to {path}", file=sys.stderr)
    except OSError as error:
        print(f"error: cannot write the request log under {request_log.folder}: {error}",
              file=sys.stderr)
        return False
    return True


def _request_log(args: argparse.Namespace, config):
    """--log-requests' log (pipeline/predict_log.py), or None."""
    if args.log_requests is None:
        return None
    from pipeline import predict_log

    return predict_log.RequestLog(args.log_requests, config, args.signature,
                                  args.log_sample_rate)


if __name__ == "__main__":
    sys.exit(main())
