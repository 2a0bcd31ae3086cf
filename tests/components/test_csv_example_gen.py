"""The config-typed CSV reader: null markers, declared types, and errors that say where."""
from __future__ import annotations

import pytest

from tests.helpers import read_as

pytestmark = pytest.mark.slow  # TFX's ExampleGen executor on Beam: not in make test-fast


def reader():
    """Imported when a test runs, not at collection (tests/README.md)."""
    import components.example_gen.csv_reader

    return components.example_gen.csv_reader


FEATURES = read_as({"label": "kind", "numeric": ["length", "weight"],
                    "categorical": ["site"], "ignored": ["extra"]})
HEADER = "kind,site,length,weight,extra\n"


def examples(text: str):
    return list(reader().parse_csv("f.csv", text, FEATURES, ["NA", ""]))


def test_null_markers_are_missing_and_numerics_stay_numeric():
    [full, partial] = examples(HEADER + "a,north,39.1,3750,2007\nb,south,NA,,2008\n")
    assert full.features.feature["length"].float_list.value == [pytest.approx(39.1)]
    assert full.features.feature["site"].bytes_list.value == [b"north"]
    assert "extra" not in full.features.feature  # ignored columns are dropped
    assert "length" not in partial.features.feature
    assert "weight" not in partial.features.feature
    assert partial.features.feature["kind"].bytes_list.value == [b"b"]


def test_text_in_a_numeric_column_names_file_line_column_and_value():
    with pytest.raises(reader().DataError, match=r"f\.csv, line 3, column 'weight': 'heavy' is not "
                                              r"a number.*null_markers"):
        examples(HEADER + "a,north,39.1,3750,2007\na,north,39.1,heavy,2007\n")


def test_missing_and_unexpected_columns():
    with pytest.raises(reader().DataError, match=r"missing column\(s\) \['weight'\]"):
        examples("kind,site,length,extra\na,north,39.1,2007\n")
    with pytest.raises(reader().DataError, match=r"unexpected column\(s\) \['colour'\].*features"):
        examples(HEADER.strip() + ",colour\na,north,39.1,3750,2007,blue\n")


@pytest.mark.parametrize("text, words", [("", "is empty"), ("\n", "is empty"),
                                         (HEADER, "has a header but no rows")])
def test_empty_files(text, words):
    with pytest.raises(reader().DataError, match=words):
        examples(text)


def test_ragged_row():
    with pytest.raises(reader().DataError, match="line 2: 3 cells where the header has 5"):
        examples(HEADER + "a,north,39.1\n")


def test_window_takes_the_newest_spans_up_to_the_current_one(tmp_path):
    for day in ("20240101", "20240102", "20240103", "20240104"):
        (tmp_path / f"span-{day}").mkdir()
        (tmp_path / f"span-{day}" / "rows.csv").write_text(HEADER)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "rows.csv").write_text(HEADER)
    pattern = "span-{YYYY}{MM}{DD}/*.csv"
    jan3 = 19725  # days from 1970-01-01 to 2024-01-03
    window = reader().files_in_window(str(tmp_path), pattern, jan3, 2)
    assert [p.split("/")[-2] for files in window.values() for p in files] == [
        "span-20240102", "span-20240103"]
    assert len(reader().files_in_window(str(tmp_path), pattern, jan3 + 10, 10)) == 4


# ---------------------------------------------------------------- policy shared with the client

@pytest.mark.parametrize("cell, words", [
    ("nan", "'nan' is not a number the pipeline accepts"), ("-inf", "'-inf' is not a number"),
    ("Infinity", "'Infinity' is not a number"), ("1e39", "'1e39' is out of float32 range")])
def test_nan_infinity_and_float32_overflow_are_refused(cell, words):
    with pytest.raises(reader().DataError, match=rf"f\.csv, line 3, column 'weight': {words}"):
        examples(HEADER + "a,north,39.1,3750,2007\n" + f"a,north,39.1,{cell},2007\n")


def test_a_repeated_column_is_refused():
    with pytest.raises(reader().DataError, match=r"column\(s\) \['site'\] appear more than once"):
        examples("kind,site,site,length,weight,extra\n"
                 "a,north,north,39.1,3750,2007\n")


# ---------------------------------------------------------------- splits and serialization

def _reference(text: str) -> list:
    """What the reader wrote before it typed in batches: one proto per row, cell by cell."""
    import csv
    import io

    import tensorflow as tf

    rows = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(rows)]
    out = []
    for row in rows:
        if not row:
            continue
        example = tf.train.Example()
        for column, cell in zip(header, row, strict=True):
            if column == "extra" or cell in ("NA", ""):
                continue
            feature = example.features.feature[column]
            if column in FEATURES["numeric"]:
                feature.float_list.value.append(float(cell))
            else:
                feature.bytes_list.value.append(cell.encode())
        out.append(example.SerializeToString(deterministic=True))
    return out


def _rows(n: int) -> str:
    import random

    rng = random.Random(3)
    lines = [HEADER.strip()]
    for i in range(n):
        cells = [rng.choice(["a", "b", "NA"]),
                 rng.choice(["north", "south", "", "Île"]),
                 rng.choice(["NA", f"{rng.uniform(30, 60):.1f}", "-0", "1e-3"]),
                 rng.choice(["", str(rng.randint(2700, 6300)), "3.4028235e38"]), "2007"]
        lines.append(",".join(cells))
        if i % 97 == 0:
            lines.append("")  # blank lines are skipped
    lines.append("NA,,NA,NA,2009")  # nothing present: an empty example
    return "\n".join(lines) + "\n"


def _read_in_splits(path, split_bytes: int) -> list:
    from components.example_gen.csv_reader import file_splits, read_split

    settings = {"features": FEATURES, "null_markers": ["NA", ""]}
    return [e for split in file_splits(str(path), split_bytes) for e in read_split(split, settings)]


def test_any_split_and_block_size_gives_the_reference_bytes_in_order(tmp_path, monkeypatch):
    # Byte-identical to the proto path: ExampleGen hashes these bytes into train and eval. A
    # range is decoded in blocks of whole lines (BLOCK_BYTES); a block may be shorter than a line.
    text = _rows(3000)
    path = tmp_path / "rows.csv"
    path.write_text(text)
    expected = _reference(text)
    assert [e.SerializeToString(deterministic=True) for e in examples(text)] == expected
    for block_bytes in (1, 50, 1 << 20):
        monkeypatch.setattr(reader(), "BLOCK_BYTES", block_bytes)
        for split_bytes in (7, 1000, 4096, 10**9):
            assert _read_in_splits(path, split_bytes) == expected, (split_bytes, block_bytes)


def test_an_error_in_a_later_split_names_its_line(tmp_path):
    rows = [f"a,north,{40 + i % 7}.5,3750,2007" for i in range(5000)]
    rows[4321] = "a,north,39.1,heavy,2007"
    path = tmp_path / "rows.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    with pytest.raises(reader().DataError, match=rf"{path}, line 4323, column 'weight': 'heavy'"):
        _read_in_splits(path, 20_000)


def test_every_split_checks_the_header(tmp_path):
    from components.example_gen.csv_reader import file_splits, read_split

    path = tmp_path / "rows.csv"
    path.write_text("kind,site,length,extra\n" + "a,north,39.1,2007\n" * 500)
    splits = file_splits(str(path), 1000)
    assert len(splits) > 2
    with pytest.raises(reader().DataError, match=r"missing column\(s\) \['weight'\]"):
        list(read_split(splits[-1], {"features": FEATURES, "null_markers": ["NA"]}))


def test_a_quoted_line_break_reads_whole_in_one_split_and_is_refused_across_splits(
        tmp_path, monkeypatch):
    text = HEADER + 'a,"north\nside",39.1,3750,2007\n' + "b,south,40,4000,2008\n"
    [first, _] = examples(text)
    assert first.features.feature["site"].bytes_list.value == [b"north\nside"]
    path = tmp_path / "rows.csv"
    path.write_text(text)
    monkeypatch.setattr(reader(), "BLOCK_BYTES", 40)  # the cell's two lines in two blocks
    assert _read_in_splits(path, 10**9)[0] == first.SerializeToString(deterministic=True)
    path.write_text(text + "b,south,40,4000,2008\n" * 100)
    with pytest.raises(reader().DataError,
                       match=r"line 2: a quoted cell spans lines.*split the file"):
        _read_in_splits(path, 500)


@pytest.mark.parametrize("split_bytes, block_bytes", [(10**9, 1 << 20), (300, 1 << 20),
                                                      (10**9, 100)])
def test_bytes_that_are_not_utf8_name_the_file_line_and_what_to_do(tmp_path, monkeypatch,
                                                                  split_bytes, block_bytes):
    monkeypatch.setattr(reader(), "BLOCK_BYTES", block_bytes)
    rows = ["a,north,39.1,3750,2007"] * 40
    rows[30] = "a,nörth,39.1,3750,2007"
    path = tmp_path / "latin1.csv"
    path.write_bytes((HEADER + "\n".join(rows) + "\n").encode("latin-1"))
    with pytest.raises(reader().DataError, match=rf"{path}, line 32: bytes b'\\xf6' at character 4 "
                                              r"are not UTF-8; save the file as UTF-8"):
        _read_in_splits(path, split_bytes)


def test_a_header_that_is_not_utf8_is_line_1(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes(HEADER.replace("site", "sîte").encode("latin-1")
                     + b"a,north,39.1,3750,2007\n")
    with pytest.raises(reader().DataError, match=rf"{path}, line 1: bytes b'\\xee'"):
        _read_in_splits(path, 10**9)


def test_a_regression_label_is_a_number_and_a_text_label_cell_names_its_place():
    regression = {**FEATURES, "label": "weight", "numeric": ["length"],
                  "categorical": ["site", "kind"], "label_kind": "number"}
    [example] = reader().parse_csv("f.csv", HEADER + "a,north,39.1,3750.5,2007\n", regression,
                                ["NA", ""])
    assert example.features.feature["weight"].float_list.value == [3750.5]
    with pytest.raises(reader().DataError, match=r"f\.csv, line 3, column 'weight': 'heavy' is not "
                                              r"a number"):
        list(reader().parse_csv(
            "f.csv", HEADER + "a,north,39.1,3750,2007\na,north,39.1,heavy,2007\n",
            regression, ["NA", ""]))


def test_class_labels_stay_text_even_when_they_are_digits():
    [example] = reader().parse_csv("f.csv", "y,x\n1,2.5\n",
                                   read_as({"label": "y", "numeric": ["x"]}), ["NA"])
    assert example.features.feature["y"].bytes_list.value == [b"1"]  # positive_class "1"


@pytest.mark.parametrize("block_bytes", [1, 30, 1 << 20])
def test_the_report_counts_csv_records_a_block_at_a_time(tmp_path, monkeypatch, block_bytes):
    # Blank lines are no rows; a quoted line break is one row; the header is not counted.
    monkeypatch.setattr(reader(), "BLOCK_BYTES", block_bytes)
    path = tmp_path / "rows.csv"
    path.write_text(HEADER + 'a,"north\nside",39.1,3750,2007\n\n' + "b,south,40,4000,2008\n" * 3)
    assert reader().count_rows(str(path)) == 4
    path.write_text(HEADER)
    assert reader().count_rows(str(path)) == 0
    path.write_text("")
    assert reader().count_rows(str(path)) == 0


# ---------------------------------------------------------------- input limits (issue 25)

def test_a_cell_over_the_csv_limit_names_the_file_and_line(tmp_path):
    """A 200 KiB cell raised a bare `_csv.Error: field larger than field limit` before."""
    rows = ["a,north,39.1,3750,2007"] * 3 + ["a,north,39.1,3750," + "x" * 200_000]
    path = tmp_path / "big.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    with pytest.raises(reader().DataError, match=rf"{path}, line 5: field larger than field "
                                                 r"limit \(131072\): a cell is at most"):
        _read_in_splits(path, 10**9)
    with pytest.raises(reader().DataError, match=r"f.csv, line 5: field larger"):
        examples(HEADER + "\n".join(rows) + "\n")
    with pytest.raises(reader().DataError, match=rf"{path}, line 5: field larger"):
        reader().count_rows(str(path))


def test_a_header_over_the_line_limit_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(reader(), "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(reader(), "BLOCK_BYTES", 64)
    path = tmp_path / "one-line.csv"
    path.write_text("kind," * 5000)  # no line break anywhere
    with pytest.raises(reader().DataError, match=rf"{path}, line 1: over 0 MiB without a line "
                                                 "break: a CSV file holds one row per line"):
        _read_in_splits(path, 10**9)


def test_a_row_over_the_line_limit_at_a_split_edge_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(reader(), "MAX_LINE_BYTES", 5000)
    rows = ["a,north,39.1,3750,2007"] * 100 + ["a,north,39.1,3750," + "y" * 100_000]
    path = tmp_path / "tail.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    with pytest.raises(reader().DataError, match=r"without a line break"):
        _read_in_splits(path, 3000)


def test_a_repeat_in_a_wide_header_is_found():
    """100,000 columns: header.count per column (quadratic, minutes) is now one Counter pass."""
    header = [f"c{i}" for i in range(100_000)] + ["c7"]
    with pytest.raises(reader().DataError, match=r"\['c7'\] appear more than once"):
        reader()._checked_header("wide.csv", ",".join(header) + "\n", {})
