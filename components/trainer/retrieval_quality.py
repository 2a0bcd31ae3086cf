"""How well `retrieve` finds what users clicked: hit rate at k on the eval split.

For every eval example whose label is the positive class (a click), the export's `retrieve`
module answers the k best items for the query tower's vector of its query features; a hit is the
clicked item among them. The same is measured for the k most frequent items (the vocabulary's
first k: what a popularity list would serve), the floor a personalised retrieval must beat.
Written to the Trainer's model_run as RETRIEVAL_FILE; the run report and summary read it.
"""
from __future__ import annotations

import json
import os
from typing import Dict

import numpy as np
import tensorflow as tf

from models.features import FeatureSpec, transformed_name

RETRIEVAL_FILE = "retrieval.json"
# Eval examples read at most (the measure is a share; this bounds its cost).
MAX_EXAMPLES = 50_000


def measure(model, dataset: tf.data.Dataset, spec: FeatureSpec, top_k, positive: int = 1
            ) -> Dict[str, float]:
    """Hit rates at the config's k over the positive examples of `dataset` ((features, label)
    batches of transformed features). `top_k`: the export's own retrieval module
    (components/trainer/retrieval.py BruteForceTopK, model.top_k once exported), so what is
    measured is what `retrieve` answers; memory follows a batch, not the eval split."""
    from models.two_tower import QUERY_TOWER

    query_tower = model.get_layer(QUERY_TOWER)
    candidate_key = transformed_name(spec.retrieval["candidate"])
    query_keys = [transformed_name(f) for f in spec.query_inputs]
    names = top_k.ids.numpy()  # vocabulary order: most frequent first
    hits = popular = clicked = seen = 0
    for features, labels in dataset:
        mask = labels.numpy().reshape(-1) == positive
        seen += len(mask)
        if mask.any():
            answered = top_k(query_tower({key: tf.boolean_mask(features[key], mask)
                                          for key in query_keys}))["item_ids"].numpy()
            # Vocabulary index of each clicked item; OOV ids (past the vocabulary) never hit.
            index = features[candidate_key].numpy().reshape(-1)[mask] - 1
            known = index < len(names)
            item = np.where(known, names[np.minimum(index, len(names) - 1)], b"")
            hits += int(((answered == item[:, None]) & known[:, None]).any(axis=1).sum())
            popular += int((known & (index < top_k.k)).sum())
            clicked += int(mask.sum())
        if seen >= MAX_EXAMPLES:
            break
    return {"k": int(top_k.k), "clicked_examples": clicked, "items": len(names),
            "hit_rate": hits / clicked if clicked else 0.0,
            "popular_hit_rate": popular / clicked if clicked else 0.0}


def write(result: Dict[str, float], model_run_dir: str) -> None:
    with tf.io.gfile.GFile(os.path.join(model_run_dir, RETRIEVAL_FILE), "w") as f:
        json.dump(result, f)
