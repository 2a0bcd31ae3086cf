"""A few rows in the training data's CSV layout, taken from the bundled config's newest span:
the first row of each label class, then the same rows with missing values (one categorical cell,
one numeric cell, every feature) and a category the model never saw. Built from the config, so a
fork's own data and columns give its own sample."""
import csv
import io

from tests.helpers import example_config, newest_span, span_files

UNSEEN_CATEGORY = "never-seen-value"


def _sample_csv() -> str:
    config = example_config()
    features, missing = config.features, config.data.null_markers[0]
    [path] = span_files(newest_span(config.data.input_base))
    header, *rows = list(csv.reader(io.StringIO(path.read_text())))
    at = {name: header.index(name) for name in header}
    firsts = list({row[at[features.label]]: row for row in reversed(rows) if row}.values())[::-1]

    def changed(row, **cells):
        return [cells.get(name, cell) for name, cell in zip(header, row, strict=True)]

    first = firsts[0]
    sample = [*firsts,
              changed(first, **{features.categorical[-1]: config.data.null_markers[-1]}),
              changed(first, **{features.numeric[0]: missing}),
              changed(first, **{features.categorical[0]: UNSEEN_CATEGORY}),
              changed(first, **{name: missing for name in features.model_inputs})]
    return _lines([header, *sample])


def _lines(rows) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def with_cell(column: str, cell: str) -> str:
    """SAMPLE_CSV's first row, as a CSV line, with column's cell replaced by cell."""
    header, first = list(csv.reader(io.StringIO(SAMPLE_CSV)))[:2]
    return _lines([[cell if name == column else value
                    for name, value in zip(header, first, strict=True)]])


SAMPLE_CSV = _sample_csv()
SAMPLE_ROWS = SAMPLE_CSV.count("\n") - 1
