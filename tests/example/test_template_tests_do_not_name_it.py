"""Template tests do not hard-code the bundled example (tests/README.md): outside tests/example
no test module's string literals name the example config's columns, pipeline or model name, or a
value of its schema's categorical domains. About the example's names, so here: a fork's own
names may be common words that neutral fixtures use too (kind, site, ...)."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from tests.helpers import REPO, example_config

TESTS = REPO / "tests"
# fork_check.py holds the rewrite of the example. tests/models/transform_rows.py's own rows, and
# the modules that read them, keep penguin-like column names: their own features and raw schema,
# independent of configs/ (a fork's config does not reach them), not yet renamed.
EXEMPT = {"fork_check.py", "models/transform_rows.py"}
OWN_ROWS = "tests.models.transform_rows"


def example_words() -> set:
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    config = example_config()
    words = {config.pipeline_name, config.serving.model_name, *config.features.columns}
    if config.schema_file is not None:
        schema = text_format.Parse(config.schema_file.read_text(), schema_pb2.Schema())
        words.update(value for domain in schema.string_domain for value in domain.value)
    return words


def literals_naming(path: Path, words: set) -> list:
    """(line, word) for each word that a string literal of path names as a whole word."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(words))) + r")\b")
    found = []
    strings = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in strings:
            found += [(token.start[0], m.group(1)) for m in pattern.finditer(token.string)]
    return found


def template_modules() -> list:
    return [p for p in sorted(TESTS.rglob("*.py"))
            if p.relative_to(TESTS).parts[0] != "example"
            and p.relative_to(TESTS).as_posix() not in EXEMPT and OWN_ROWS not in p.read_text()]


def test_no_template_test_names_the_example():
    words = example_words()
    found = {p.relative_to(REPO).as_posix(): hits for p in template_modules()
             if (hits := literals_naming(p, words))}
    assert found == {}, "template tests hard-code the example (use tests.helpers.example_config"\
        f" or a neutral fixture, or move the test to tests/example): {found}"


def test_the_check_sees_a_literal_column(tmp_path):
    # Negative control: a test that hard-codes the label is found.
    label = example_config().features.label
    module = tmp_path / "test_hard_coded.py"
    module.write_text(f'def test_x():\n    assert row["{label}"] == 1  # "{label}" in a comment\n')
    assert literals_naming(module, example_words()) == [(2, label)]
