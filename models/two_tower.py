"""The recommender of the design notes: a two-tower network (config `model_module: two_tower`).

The candidate tower embeds the item (the config's `retrieval.candidate` id column): embedding ->
Dense relu -> L2 normalisation. The query tower embeds every other input (the click history,
averaged over its items, and the context columns) to the same space: -> Dense relu -> L2
normalisation. Their dot product (a cosine) goes through the task's head (a binary click: a
learned scale and bias, then a sigmoid) and is trained with binary cross-entropy.

The export (components/trainer/export.py) finds the towers by name ("query_tower",
"candidate_tower") to serve `retrieve`: every item's candidate vector is computed once and held
in the SavedModel, and a query's top k are found by brute force.
"""
from __future__ import annotations

from typing import Annotated, Mapping

import tensorflow as tf
import tf_keras as keras
from pydantic import Field

from models.features import FeatureSpec
from models.model import compiled, encoded_inputs

QUERY_TOWER, CANDIDATE_TOWER = "query_tower", "candidate_tower"


@keras.utils.register_keras_serializable(package="models")
class L2Normalize(keras.layers.Layer):
    def call(self, x):
        return tf.math.l2_normalize(x, axis=-1)


def _tower(name: str, inputs: dict, encoded: list, units: int, dropout: float) -> keras.Model:
    x = keras.layers.Concatenate()(encoded) if len(encoded) > 1 else encoded[0]
    if dropout:
        x = keras.layers.Dropout(dropout, name=f"{name}_dropout")(x)
    x = keras.layers.Dense(units, activation="relu", name=f"{name}_dense")(x)
    # float32 so that the served vectors and scores are, under any precision policy.
    x = L2Normalize(dtype="float32", name=f"{name}_l2")(x)
    return keras.Model(inputs=inputs, outputs=x, name=name)


def build_model(spec: FeatureSpec, categorical_sizes: Mapping[str, int], head, *,
                embedding_dim: Annotated[int, Field(ge=1)] = 128,
                tower_units: Annotated[int, Field(ge=1)] = 64,
                learning_rate: Annotated[float, Field(gt=0.0)] = 0.01,
                share_embeddings: bool = True,
                dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0,
                jit_compile: bool = False, steps_per_execution: int = 1) -> keras.Model:
    """The two towers joined by a dot product and the task's head (binary: click_prob).

    Hyper-parameters (the config's `model:`): the embedding width of every id and list
    (`embedding_dim`), the towers' Dense width (`tower_units`, the retrieval space), Adam's
    learning rate; `share_embeddings`: the history's items and the candidate item (one
    vocabulary) look up one embedding table (fewer weights to learn from the same clicks), or
    two of the same size; `dropout`: the share of each tower's inputs dropped in training.
    """
    if not spec.retrieval:
        raise ValueError("model_module two_tower needs the config's `retrieval` section (its "
                         "candidate: the id column the candidate tower embeds)")
    query_embeddings: dict = {}
    query_inputs, query_encoded = encoded_inputs(spec, categorical_sizes, embedding_dim,
                                                 spec.query_inputs, query_embeddings)
    candidate_inputs, candidate_encoded = encoded_inputs(
        spec, categorical_sizes, embedding_dim, spec.candidate_inputs,
        query_embeddings if share_embeddings else {})
    query = _tower(QUERY_TOWER, query_inputs, query_encoded, tower_units, dropout)
    candidate = _tower(CANDIDATE_TOWER, candidate_inputs, candidate_encoded, tower_units,
                       dropout)
    inputs = {**query_inputs, **candidate_inputs}
    cosine = keras.layers.Dot(axes=1, name="cosine")([query(query_inputs),
                                                      candidate(candidate_inputs)])
    return compiled(keras.Model(inputs=inputs, outputs=head(cosine)), head, learning_rate,
                    jit_compile, steps_per_execution)
