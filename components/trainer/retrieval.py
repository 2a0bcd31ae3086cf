"""Brute-force top-k retrieval held inside the SavedModel: every candidate's embedding and id.

    module = BruteForceTopK(embeddings, ids, k)     # float32 [N, d], str/bytes [N]
    module(queries)  # float32 [B, d] -> {"item_ids": string [B, k], "scores": float32 [B, k]}

Scores are dot products (one matmul against all N candidates), ranked by `tf.math.top_k`: exact,
best first; between equal scores the lower candidate index comes first. A k larger than N is
clamped to N (`module.k` is the k it answers with, `requested_k` the one asked for), so that a
small vocabulary still exports; k < 1, an empty or mismatched candidate set is refused here.
Both are non-trainable variables: they live in the SavedModel's variables/ (not in the graph
proto, whose 2 GB limit a large catalogue would reach) and load under the TF1 loader that TF
Serving uses. The embeddings are held transposed, [d, N]: a plain [B, d] x [d, N] matmul, whose
matmul + top_k measured ~15% faster than transpose_b on [N, d] at batch 1 and 8 (bench/README.md).
"""
from __future__ import annotations

from typing import Callable, Dict, Mapping, Sequence

import numpy as np
import tensorflow as tf

ITEM_IDS, SCORES = "item_ids", "scores"


class BruteForceTopK(tf.Module):
    def __init__(self, candidate_embeddings: np.ndarray, candidate_ids: Sequence, k: int,
                 name: str = "brute_force_top_k"):
        super().__init__(name=name)
        embeddings = np.ascontiguousarray(candidate_embeddings, dtype=np.float32)
        ids = np.asarray([i.encode() if isinstance(i, str) else i for i in candidate_ids],
                         dtype=object)
        if not all(isinstance(i, bytes) for i in ids):
            raise TypeError("candidate_ids must be str or bytes")
        if embeddings.ndim != 2 or embeddings.shape[0] == 0 or embeddings.shape[1] == 0:
            raise ValueError("candidate_embeddings must be a non-empty [N, d] array, got shape "
                             f"{embeddings.shape}")
        if ids.shape != (embeddings.shape[0],):
            raise ValueError(f"{embeddings.shape[0]} candidate embeddings but {len(ids)} ids")
        if not np.isfinite(embeddings).all():
            raise ValueError("candidate_embeddings hold NaN or infinite values")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        self.requested_k = int(k)
        self.k = min(int(k), embeddings.shape[0])
        self.dim = embeddings.shape[1]
        with self.name_scope:
            self.embeddings_t = tf.Variable(np.ascontiguousarray(embeddings.T), trainable=False,
                                            name="embeddings_t")  # [d, N]
            self.ids = tf.Variable(ids, dtype=tf.string, trainable=False, name="ids")

    def __call__(self, queries: tf.Tensor) -> Dict[str, tf.Tensor]:
        """queries float32 [B, d] -> the k best candidates of each query, best first. A plain
        method: traced into the calling tf.function (the export's `retrieve` signature)."""
        queries = tf.convert_to_tensor(queries, tf.float32)
        queries.shape.assert_is_compatible_with([None, self.dim])
        scores = tf.matmul(queries, self.embeddings_t)  # [B, N]
        top = tf.math.top_k(scores, k=self.k, sorted=True)
        return {ITEM_IDS: tf.gather(self.ids, top.indices), SCORES: top.values}


def candidate_embeddings(candidate_tower, input_name: str, count: int,
                         batch_size: int = 8192) -> np.ndarray:
    """float32 [count, d]: the tower's embedding of ids 1..count (0 is padding), called as
    `candidate_tower({input_name: int64 [n, 1]}, training=False)` in batches of batch_size."""
    if count < 1:
        raise ValueError(f"no candidates to embed (count={count})")
    batches = []
    for start in range(1, count + 1, batch_size):
        ids = np.arange(start, min(start + batch_size, count + 1), dtype=np.int64)[:, None]
        out = candidate_tower({input_name: tf.constant(ids)}, training=False)
        batches.append(np.reshape(np.asarray(out, dtype=np.float32), (len(ids), -1)))
    return np.concatenate(batches)


def retrieval_signature(module: BruteForceTopK, query_fn: Callable[[Dict], tf.Tensor],
                        inputs: Mapping[str, tf.TensorSpec]):
    """The concrete function for `signatures={"retrieve": ...}`: flat keyword inputs (TF
    Serving's REST rows map onto them, as raw_features) -> query_fn(dict of them), float
    [B, d] -> module."""
    return tf.function(lambda **kw: module(tf.cast(query_fn(kw), tf.float32))
                       ).get_concrete_function(**inputs)
