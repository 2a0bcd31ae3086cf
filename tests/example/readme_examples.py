"""The request examples documented in deploy/serving/README.md, read from the file itself, so that
the tests exercise exactly what a reader would send (and fail when the README drifts)."""
from __future__ import annotations

import ast
import json
import re

from tests.helpers import REPO

SERVING_README = REPO / "deploy" / "serving" / "README.md"


def raw_features_body() -> dict:
    """The JSON body of the `curl ... -d '{...}'` call that uses the raw_features signature."""
    bodies = re.findall(r"-d '(\{.*?\})'", SERVING_README.read_text(), re.S)
    matches = [json.loads(b) for b in bodies if '"raw_features"' in b]
    assert len(matches) == 1, f"expected one raw_features curl example in {SERVING_README}"
    return matches[0]


def serving_default_features() -> dict:
    """The feature values (`raw = {...}`) of the tf.Example the serving_default example sends."""
    found = re.search(r"^raw = (\{[^}]*\})", SERVING_README.read_text(), re.M)
    assert found, f"no `raw = {{...}}` tf.Example in {SERVING_README}"
    return ast.literal_eval(found.group(1))


def documented_classes() -> dict:
    """{signature: [class_name, ...]}: the answers the README shows after each predict example
    (the `# {"predictions": ...}` comment that closes each example's code block), in row order."""
    text = SERVING_README.read_text()
    answers = {}
    for signature, start in (("raw_features", '"signature_name": "raw_features"'),
                             ("serving_default", '-d "{\\"instances\\": [{\\"b64\\"')):
        assert text.count(start) == 1, f"expected one {signature} example in {SERVING_README}"
        block = text.split(start, 1)[1].split("```", 1)[0]
        comment = "\n".join(line for line in block.splitlines() if line.startswith("#"))
        answers[signature] = re.findall(r'"class_name": "(\w+)"', comment)
    return answers
