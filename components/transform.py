"""Transform's preprocessing_fn (pipeline/builder.py names it): the user's features
(models/preprocessing.py) and the label as the config's task kind trains on it
(components/heads.py), so the user's code is the same for every kind."""
from __future__ import annotations

from typing import Dict, Mapping

import tensorflow as tf

from components import heads
from models import preprocessing
from models.features import FeatureSpec


def preprocessing_fn(inputs: Mapping[str, tf.Tensor], custom_config: Mapping
                     ) -> Dict[str, tf.Tensor]:
    spec = FeatureSpec.from_custom_config(custom_config)
    outputs = preprocessing.preprocessing_fn(inputs, custom_config)
    outputs[spec.label_xf] = heads.encode_label(inputs[spec.label], spec,
                                                custom_config["task"])
    return outputs
