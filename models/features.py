"""Feature names and kinds, as the config declares them, in the form the model code needs.

Transform and Trainer run as TFX executors (possibly in other processes or containers), so they get
the feature declaration through their custom_config as a plain dict, not the config object.

Transformed kinds (models/preprocessing.py writes them, the network reads them):
- numeric: float32 [batch]; categorical: its vocabulary index, int64 [batch];
- id: int64 [batch] with 0 reserved (a missing value, or a list's padding): vocabulary index + 1,
  OOV buckets after the vocabulary (or 1 + a hash bucket);
- list: [batch, length] of the element's kind (a categorical list's padding is id 0); a ragged
  list (length null) a SparseTensor [batch, None], made dense by as_model_inputs (padding 0, or
  NaN for numbers).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional

import tensorflow as tf


def transformed_name(name: str) -> str:
    """The name of a feature after Transform; the suffix keeps raw and transformed apart."""
    return f"{name}_xf"


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    label: str
    numeric: List[str]
    categorical: List[str]
    num_oov_buckets: int = 1
    # name -> {top_k, oov_buckets, hash_buckets} (core/config/data.py IdConfig)
    ids: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)
    # name -> {element, length, keep, padding, vocabulary, ids} (core/config/data.py ListConfig)
    lists: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)
    # {candidate, k} or None (core/config/training.py RetrievalConfig)
    retrieval: Optional[Mapping] = None

    @classmethod
    def from_custom_config(cls, custom_config: Mapping) -> "FeatureSpec":
        features = custom_config["features"]
        return cls(label=features["label"], numeric=list(features["numeric"]),
                   categorical=list(features["categorical"]),
                   num_oov_buckets=int(custom_config["preprocessing"]["num_oov_buckets"]),
                   ids=dict(features["ids"]), lists=dict(features["lists"]),
                   retrieval=custom_config.get("retrieval"))

    @property
    def inputs(self) -> List[str]:
        """Raw features the model reads (label excluded), in a stable order."""
        return [*self.numeric, *self.categorical, *self.ids, *self.lists]

    @property
    def label_xf(self) -> str:
        return transformed_name(self.label)

    def list_of(self, kind: str) -> List[str]:
        """The list features whose element is `kind` ("categorical" or "numeric")."""
        return [name for name, column in self.lists.items() if column["element"] == kind]

    @property
    def id_valued(self) -> List[str]:
        """Features whose transformed values are ids with 0 reserved: id columns, categorical
        lists."""
        return [*self.ids, *self.list_of("categorical")]

    def vocabulary_name(self, feature: str) -> str:
        """The TFT vocabulary file name of a feature (a list sharing an id column's vocabulary:
        that column's) or of the label."""
        column = self.lists.get(feature)
        return column["vocabulary"] if column and column.get("vocabulary") else feature

    def id_settings(self, feature: str) -> Mapping:
        """{top_k, oov_buckets, hash_buckets} of an id-valued feature (a shared vocabulary's
        column's)."""
        name = self.vocabulary_name(feature)
        return self.ids[name] if name in self.ids else self.lists[feature]["ids"]

    def uses_vocabulary(self, feature: str) -> bool:
        return feature in self.categorical or self.id_settings(feature).get("hash_buckets") is None

    def categorical_sizes(self, vocabulary_size: Mapping[str, int]) -> Dict[str, int]:
        """Number of ids each transformed categorical, id or categorical-list feature can take
        (OOV buckets and the reserved 0 included); vocabulary_size: by vocabulary name."""
        sizes = {transformed_name(f): vocabulary_size[f] + self.num_oov_buckets
                 for f in self.categorical}
        for f in self.id_valued:
            settings = self.id_settings(f)
            sizes[transformed_name(f)] = 1 + (
                settings["hash_buckets"] if settings.get("hash_buckets") is not None
                else vocabulary_size[self.vocabulary_name(f)] + settings["oov_buckets"])
        return sizes

    @property
    def vocabularies(self) -> List[str]:
        """The vocabulary names the model's sizes need (hashed ids have none)."""
        names = [*self.categorical, *(self.vocabulary_name(f) for f in self.id_valued
                                      if self.uses_vocabulary(f))]
        return list(dict.fromkeys(names))

    # Retrieval (a two-tower model): the candidate's features and the query's (every other).
    @property
    def candidate_inputs(self) -> List[str]:
        return [self.retrieval["candidate"]] if self.retrieval else []

    @property
    def query_inputs(self) -> List[str]:
        return [f for f in self.inputs if f not in self.candidate_inputs]


def _model_input(name: str, value, spec: FeatureSpec) -> tf.Tensor:
    column = spec.lists.get(name)
    if column is None:
        return tf.reshape(value, [-1, 1])
    if isinstance(value, tf.SparseTensor):  # a ragged list: padded to the batch's longest
        default = tf.constant(float("nan") if column["element"] == "numeric" else 0,
                              value.dtype)
        value = tf.sparse.to_dense(value, default_value=default)
    return value


def as_model_inputs(transformed: Mapping[str, tf.Tensor], spec: FeatureSpec,
                    features: Optional[List[str]] = None) -> Dict[str, tf.Tensor]:
    """The transformed features the network takes (all, or `features`'): single values shaped
    [batch, 1], lists [batch, length]."""
    return {transformed_name(f): _model_input(f, transformed[transformed_name(f)], spec)
            for f in (spec.inputs if features is None else features)}
