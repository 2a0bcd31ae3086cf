"""The TensorFlow side of each task kind: a Task (core/tasks.py) names its head here by class name.

A head is what a kind adds around the user's network (models/), which stays the same for every
kind:
- `encode_label` (Transform, components/transform.py): the raw label as the kind trains on it,
  which is also the label TFMA reads through the transform_features signature;
- `fitted` (the Trainer, before the network is built): the head for this training data (the
  label vocabulary's classes, a regression label's scale), checked against the config;
- `head(x)` (models/model.py's build_model): the output layer on the network's last tensor,
  float32 under any mixed-precision policy; `loss()`, Task.loss (the class the Evaluator declares
  as TFMA's "loss"), and `metrics()`, the Keras metrics in the training history;
- `serving_outputs(output)` (the export): what both prediction signatures return, Task.outputs.
This is the one module with TensorFlow code per kind; a new kind reuses a head or adds one here.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras

from core import tasks
from models.features import FeatureSpec

# A sample of the training data's transformed labels (components/trainer/training.py).
LabelSample = Callable[[], np.ndarray]


class LabelError(ValueError):
    """Training labels that do not fit the configured task; the message says what to do."""


def _dense(label, default) -> tf.Tensor:
    """A rank-1 dense label from one that may be sparse (missing values) or dense."""
    if isinstance(label, tf.SparseTensor):
        label = tf.sparse.to_dense(tf.SparseTensor(label.indices, label.values,
                                                   [label.dense_shape[0], 1]),
                                   default_value=default)
    return tf.reshape(label, [-1])


def _label_values(tf_transform_output: tft.TFTransformOutput, spec: FeatureSpec) -> List[str]:
    """The label's values in Transform's vocabulary of them (most frequent first)."""
    return [v.decode() if isinstance(v, bytes) else v
            for v in tf_transform_output.vocabulary_by_name(spec.vocabulary_name(spec.label))]


class Head:
    """What every head has; each kind's class below adds the rest."""

    def __init__(self, task: tasks.Task):
        self.task = task

    def loss(self) -> keras.losses.Loss:
        return getattr(keras.losses, self.task.loss)()


class SoftmaxHead(Head):
    """One class of many: the label's id in the vocabulary of class names; softmax over them;
    `probabilities` (float32 [batch, classes], the vocabulary's order) and `class_name` (the most
    probable)."""

    def __init__(self, task: tasks.Task, class_names: List[str]):
        super().__init__(task)
        self.class_names = list(class_names)
        self._names = tf.constant(self.class_names)

    @staticmethod
    def encode_label(label, spec: FeatureSpec, settings: Mapping) -> tf.Tensor:
        return tft.compute_and_apply_vocabulary(_dense(label, ""),
                                                vocab_filename=spec.vocabulary_name(spec.label))

    @classmethod
    def fitted(cls, task: tasks.Task, settings: Mapping, tf_transform_output, spec: FeatureSpec,
               label_sample: LabelSample) -> "SoftmaxHead":
        return cls(task, _label_values(tf_transform_output, spec))

    def __call__(self, x):
        logits = keras.layers.Dense(len(self.class_names), name="logits")(x)
        return keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)

    def metrics(self) -> list:
        return [keras.metrics.SparseCategoricalAccuracy()]

    def serving_outputs(self, output: tf.Tensor) -> Dict[str, tf.Tensor]:
        return {"probabilities": output,
                "class_name": tf.gather(self._names, tf.argmax(output, axis=1))}


class SigmoidHead(Head):
    """Yes or no: the label is 1 for settings' positive_class, 0 for any other value (the
    vocabulary of values is still written: the negative class's name comes from it); the
    positive class's probability; `probability` (float32 [batch]) and `class_name` (the positive
    class at a probability of at least the decision threshold, else the negative class)."""

    def __init__(self, task: tasks.Task, class_names: List[str], decision_threshold: float):
        super().__init__(task)
        self.class_names = list(class_names)  # [negative, positive]
        self.decision_threshold = decision_threshold
        self._names = tf.constant(self.class_names)

    @staticmethod
    def encode_label(label, spec: FeatureSpec, settings: Mapping) -> tf.Tensor:
        names = _dense(label, "")
        tft.vocabulary(names, vocab_filename=spec.vocabulary_name(spec.label))
        return tf.cast(tf.equal(names, settings["positive_class"]), tf.int64)

    @classmethod
    def fitted(cls, task: tasks.Task, settings: Mapping, tf_transform_output, spec: FeatureSpec,
               label_sample: LabelSample) -> "SigmoidHead":
        """Checked: the training labels must be exactly two values, one of them
        positive_class."""
        values, positive = _label_values(tf_transform_output, spec), settings["positive_class"]
        others = [v for v in values if v != positive]
        if positive not in values or len(others) != 1:
            raise LabelError(
                f"task.positive_class is '{positive}' but the training data's label "
                f"'{spec.label}' has the values {sorted(values)}: a binary task needs exactly "
                "two, one of them positive_class (values compare as text: quote it as it is "
                "written in the CSV); fix positive_class, or use task.kind multiclass")
        return cls(task, [others[0], positive], float(settings["decision_threshold"]))

    def __call__(self, x):
        logit = keras.layers.Dense(1, name="logit")(x)
        return keras.layers.Activation("sigmoid", dtype="float32", name="probability")(logit)

    def metrics(self) -> list:
        return [keras.metrics.AUC(name="auc")]

    def serving_outputs(self, output: tf.Tensor) -> Dict[str, tf.Tensor]:
        output = tf.reshape(output, [-1])
        positive = tf.cast(output >= self.decision_threshold, tf.int32)
        return {"probability": output, "class_name": tf.gather(self._names, positive)}


class ScaledValueHead(Head):
    """A number: the label as float32 (a missing one, which the schema gate refuses when the
    reviewed schema requires the label, becomes the label's mean); the network answers
    mean + std * a linear unit, so its last layer learns on a unit scale while its answer is in
    the label's units; `value` (float32 [batch])."""

    def __init__(self, task: tasks.Task, mean: float = 0.0, std: float = 1.0):
        super().__init__(task)
        self.mean, self.std = mean, std

    @staticmethod
    def encode_label(label, spec: FeatureSpec, settings: Mapping) -> tf.Tensor:
        values = tf.cast(label, tf.float32)
        return _dense(values, tft.mean(values))

    @classmethod
    def fitted(cls, task: tasks.Task, settings: Mapping, tf_transform_output, spec: FeatureSpec,
               label_sample: LabelSample) -> "ScaledValueHead":
        """The mean and std of a sample of the training labels (they only scale the output
        layer, so a sample does)."""
        labels = label_sample()
        std = float(np.std(labels)) if labels.size else 0.0
        return cls(task, mean=float(np.mean(labels)) if labels.size else 0.0,
                   std=std if std > 1e-6 else 1.0)

    def __call__(self, x):
        unit = keras.layers.Dense(1, dtype="float32", name="unit_value")(x)
        return keras.layers.Rescaling(self.std, offset=self.mean, dtype="float32",
                                      name="value")(unit)

    def metrics(self) -> list:
        return [keras.metrics.MeanAbsoluteError()]

    def serving_outputs(self, output: tf.Tensor) -> Dict[str, tf.Tensor]:
        return {"value": tf.reshape(output, [-1])}


def head_class(task: tasks.Task) -> type:
    """The head a Task names."""
    head = globals().get(task.head)
    if not (isinstance(head, type) and issubclass(head, Head)):
        raise TypeError(f"task kind {task.kind} names the head {task.head!r}, which is not a "
                        "Head of components/heads.py")
    return head


def encode_label(label, spec: FeatureSpec, task_section: Mapping) -> tf.Tensor:
    """The raw label as the kind of `task_section` (the custom_config's `task`) trains on it."""
    task, settings = tasks.task_and_settings(task_section)
    return head_class(task).encode_label(label, spec, settings)


def fitted(task_section: Mapping, tf_transform_output: tft.TFTransformOutput, spec: FeatureSpec,
           label_sample: LabelSample) -> Head:
    """The head of `task_section`'s kind for this training data; `label_sample` is called only
    by a head that needs the labels."""
    task, settings = tasks.task_and_settings(task_section)
    return head_class(task).fitted(task, settings, tf_transform_output, spec, label_sample)
