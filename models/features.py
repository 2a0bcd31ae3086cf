"""Feature names and kinds, as the config declares them, in the form the model code needs.

Transform and Trainer run as TFX executors (possibly in other processes or containers), so they get
the feature declaration through their custom_config as a plain dict, not the config object.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping

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

    @classmethod
    def from_custom_config(cls, custom_config: Mapping) -> "FeatureSpec":
        features = custom_config["features"]
        return cls(label=features["label"], numeric=list(features["numeric"]),
                   categorical=list(features["categorical"]),
                   num_oov_buckets=int(custom_config["preprocessing"]["num_oov_buckets"]))

    @property
    def inputs(self) -> List[str]:
        """Raw features the model reads (label excluded), in a stable order."""
        return [*self.numeric, *self.categorical]

    @property
    def label_xf(self) -> str:
        return transformed_name(self.label)

    def vocabulary_name(self, feature: str) -> str:
        """The TFT vocabulary file name of a categorical feature or of the label."""
        return feature

    def categorical_sizes(self, vocabulary_size: Mapping[str, int]) -> Dict[str, int]:
        """Number of ids each transformed categorical feature can take, OOV buckets included."""
        return {transformed_name(f): vocabulary_size[f] + self.num_oov_buckets
                for f in self.categorical}


def as_model_inputs(transformed: Mapping[str, tf.Tensor], spec: FeatureSpec
                    ) -> Dict[str, tf.Tensor]:
    """The transformed features the network takes, each shaped [batch, 1]."""
    return {transformed_name(f): tf.reshape(transformed[transformed_name(f)], [-1, 1])
            for f in spec.inputs}
