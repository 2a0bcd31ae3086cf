"""How well `retrieve` finds what users clicked: hit rate at k on the eval split.

For every eval example whose label is the positive class (a click), the query tower's vector of
its query features is scored against every candidate's, as `retrieve` does; a hit is the clicked
item among the k best. The same is measured for the k most frequent items (the vocabulary's
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


def hit_rates(query_vectors: np.ndarray, clicked: np.ndarray, candidates: np.ndarray, k: int
              ) -> Dict[str, float]:
    """clicked: the candidate index (0-based in `candidates`) of each query's clicked item, -1
    for one outside the vocabulary (an OOV id: never a hit)."""
    scores = query_vectors @ candidates.T
    top = np.argpartition(-scores, kth=min(k, scores.shape[1]) - 1, axis=1)[:, :k]
    hits = (top == clicked[:, None]).any(axis=1)
    popular = (clicked >= 0) & (clicked < k)
    return {"hit_rate": float(hits.mean()) if len(hits) else 0.0,
            "popular_hit_rate": float(popular.mean()) if len(popular) else 0.0}


def measure(model, dataset: tf.data.Dataset, spec: FeatureSpec, candidates: np.ndarray,
            positive: int = 1) -> Dict[str, float]:
    """Hit rates at the config's k over the positive examples of `dataset` ((features, label)
    batches of transformed features); candidates: the candidate tower's vectors of vocabulary
    ids 1..N."""
    from models.two_tower import QUERY_TOWER

    query_tower = model.get_layer(QUERY_TOWER)
    candidate_key = transformed_name(spec.retrieval["candidate"])
    query_keys = [transformed_name(f) for f in spec.query_inputs]
    vectors, clicked, seen = [], [], 0
    for features, labels in dataset:
        mask = labels.numpy().reshape(-1) == positive
        seen += len(mask)
        if mask.any():
            vectors.append(query_tower({key: tf.boolean_mask(features[key], mask)
                                        for key in query_keys}).numpy())
            ids = features[candidate_key].numpy().reshape(-1)[mask] - 1
            clicked.append(np.where(ids < len(candidates), ids, -1))
        if seen >= MAX_EXAMPLES:
            break
    k = int(spec.retrieval["k"])
    if not vectors:
        return {"k": k, "clicked_examples": 0, "items": len(candidates), "hit_rate": 0.0,
                "popular_hit_rate": 0.0}
    query_vectors, clicked_ids = np.concatenate(vectors), np.concatenate(clicked)
    return {"k": k, "clicked_examples": int(len(clicked_ids)), "items": len(candidates),
            **hit_rates(query_vectors, clicked_ids, candidates, k)}


def write(result: Dict[str, float], model_run_dir: str) -> None:
    with tf.io.gfile.GFile(os.path.join(model_run_dir, RETRIEVAL_FILE), "w") as f:
        json.dump(result, f)
