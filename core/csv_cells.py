"""What a CSV cell means, for the training-data reader and the predict client alike (TF-free).

One policy for numbers, so that a value the pipeline trains on is a value the client may send and
the other way round: a numeric cell is a number that float32 holds, or a null marker. Refused,
with the file, line, column and value:
- text that Python's float() does not read ('x2', 'heavy');
- 'nan' and 'inf' (any spelling float() reads): NaN is how a missing value reaches the model and
  infinity is no measurement, so either would be silently wrong; a missing value is a null
  marker (data.null_markers);
- a number whose float32 cast is infinite (|x| above 3.4028235e38): the model's numeric inputs and
  the tf.Example's float_list are float32 (C's (float) cast, which struct's 'f' mirrors).
Precision loss within float32's range (39.1 -> 39.099998) is how float32 stores every value.

`typed_numbers` checks a whole column at once (numpy); a None answer sends the caller to
`number` cell by cell, which names the first bad cell.
"""
from __future__ import annotations

import math
import struct
from typing import Optional, Sequence

import numpy as np

FLOAT32_MAX = struct.unpack("<f", bytes.fromhex("ffff7f7f"))[0]  # 3.4028235e+38
NULL_FIX = "fix the value, or add it to data.null_markers if it means 'missing'"


def number_problem(cell: str) -> tuple:
    """(value, None) for a usable numeric cell, else (None, what is wrong and what to do)."""
    try:
        value = float(cell)
    except ValueError:
        return None, f"{cell!r} is not a number; {NULL_FIX}"
    if not math.isfinite(value):
        return None, (f"{cell!r} is not a number the pipeline accepts (NaN and infinity are "
                      f"refused: a missing value is a null marker); {NULL_FIX}")
    try:
        struct.pack("<f", value)
    except OverflowError:
        return None, (f"{cell!r} is out of float32 range (largest {FLOAT32_MAX:.7g}); the "
                      "model's numeric inputs are float32 and it would become infinity; fix "
                      "the value")
    return value, None


def number(cell: str, path: object, line: int, column: str, error: type = ValueError) -> float:
    """The cell's value; raises `error` naming the file, line, column and value otherwise."""
    value, problem = number_problem(cell)
    if problem is not None:
        raise error(f"{path}, line {line}, column '{column}': {problem}")
    return value


def list_values(cell: str, element: str, separator: str) -> tuple:
    """(values, None) for a list cell (features.lists): its values split at the separator, numbers
    for a numeric element (by `number_problem`'s rules), an empty cell an empty list; else (None,
    what is wrong and what to do): an empty value between separators, or an element that is not
    a number."""
    values = cell.split(separator) if cell else []
    if any(value == "" for value in values):
        return None, (f"{cell!r} has an empty value between separators ({separator!r}); a list "
                      "cell is values separated by data.list_separator, an empty cell an empty "
                      "list")
    if element != "numeric":
        return values, None
    numbers = []
    for value in values:
        number_value, problem = number_problem(value)
        if problem is not None:
            return None, f"the list {cell!r} holds {problem}"
        numbers.append(number_value)
    return numbers, None


def typed_numbers(cells: Sequence[str]) -> Optional[np.ndarray]:
    """float32 values of cells that are all usable numbers (same policy as `number`), or None
    when any is not: then `number` per cell finds and names the first."""
    try:
        values = np.fromiter(map(float, cells), dtype=np.float64, count=len(cells))
    except ValueError:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        single = values.astype(np.float32)
    if not np.isfinite(single).all():  # NaN, infinity, or beyond float32
        return None
    return single


__all__ = ["FLOAT32_MAX", "NULL_FIX", "list_values", "number", "number_problem", "typed_numbers"]
