"""PLACEHOLDER (lead's stand-in until the retrieval branch merges)."""
import numpy as np
import tensorflow as tf


class BruteForceTopK(tf.Module):
    def __init__(self, embeddings, ids, k):
        super().__init__()
        self.embeddings = tf.Variable(np.asarray(embeddings, np.float32), trainable=False)
        self.ids = tf.Variable(np.asarray(ids), trainable=False)
        self.k = min(int(k), len(ids))

    @classmethod
    def from_tower(cls, tower, input_name, names, k):
        ids = np.arange(1, len(names) + 1, dtype=np.int64).reshape(-1, 1)
        return cls(tower.predict({input_name: ids}, batch_size=4096, verbose=0), names, k)

    def __call__(self, queries):
        scores = tf.matmul(queries, self.embeddings, transpose_b=True)
        top = tf.math.top_k(scores, k=self.k)
        return {"item_ids": tf.gather(self.ids, top.indices), "scores": top.values}
