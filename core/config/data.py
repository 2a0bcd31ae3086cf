"""The data sections: where the CSV spans are, their columns' kinds, and the reader's settings
that ExampleGen, DriftCheck and SkewCheck get in one shape."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Literal, Optional

from pydantic import Field, field_validator, model_validator

from core.config.base import Section


class DataConfig(Section):
    input_base: Path
    file_pattern: str = "*.csv"
    span_window: int = Field(1, ge=1)
    null_markers: List[str] = ["NA", ""]
    # What separates the values of a list column's cell (features.lists): "a|b|c".
    list_separator: str = Field("|", min_length=1)
    splits: Dict[str, int] = {"train": 3, "eval": 1}

    @field_validator("list_separator")
    @classmethod
    def _not_csv_syntax(cls, separator: str) -> str:
        if separator in (",", '"', "\n", "\r"):
            raise ValueError(f"{separator!r} is CSV syntax; choose another separator, e.g. '|'")
        return separator

    @field_validator("splits")
    @classmethod
    def _train_and_eval(cls, splits: Dict[str, int]) -> Dict[str, int]:
        if set(splits) != {"train", "eval"} or min(splits.values()) < 1:
            raise ValueError("needs exactly the splits 'train' and 'eval', each a positive ratio")
        return splits


class IdConfig(Section):
    """An id column (or a list's own ids): many values, each an embedding row. Either a vocabulary
    of the top_k most frequent training values plus oov_buckets for the rest (unseen ids hash into
    those), or hash_buckets alone (no vocabulary; collisions instead of OOV)."""
    top_k: Optional[int] = Field(None, ge=1)
    oov_buckets: int = Field(1, ge=1)
    hash_buckets: Optional[int] = Field(None, ge=2)

    @model_validator(mode="after")
    def _vocabulary_or_hashing(self) -> "IdConfig":
        # Compared with the defaults, not with the keys written: a dumped config validates again.
        if self.hash_buckets is not None and (self.top_k is not None or self.oov_buckets != 1):
            raise ValueError("hash_buckets replaces the vocabulary: set either hash_buckets, or "
                             "top_k and oov_buckets")
        return self


class ListConfig(Section):
    """A column whose cell holds several values separated by data.list_separator; an empty cell is
    an empty list."""
    element: Literal["categorical", "numeric"]
    # Fixed: a list is truncated to (keeping its `keep` values) or padded to this many; null:
    # ragged (each list its own length).
    length: Optional[int] = Field(..., ge=1)
    keep: Literal["last", "first"] = "last"
    # numeric only: the transformed value of a padded position (values are z-scored: 0.0 is the
    # mean). A categorical list pads with the reserved id 0, which the model masks.
    padding: Optional[float] = None
    # categorical only: the id column (features.ids) whose vocabulary this list shares (a click
    # history of the items a candidate column holds); unset: its own, as `ids` sets it.
    vocabulary: Optional[str] = None
    ids: IdConfig = IdConfig()

    @model_validator(mode="after")
    def _fits_the_element(self) -> "ListConfig":
        # Compared with the defaults, not with the keys written: a dumped config validates again.
        own_ids = self.ids != IdConfig()
        if self.element == "numeric":
            for key, given in (("vocabulary", self.vocabulary is not None), ("ids", own_ids)):
                if given:
                    raise ValueError(f"{key} applies to categorical lists only")
        elif self.padding is not None:
            raise ValueError("padding applies to numeric lists only (a categorical list pads "
                             "with the reserved id 0)")
        if self.vocabulary is not None and own_ids:
            raise ValueError(f"a list sharing the vocabulary of '{self.vocabulary}' takes its "
                             "ids settings from there; remove `ids`")
        return self

    @property
    def padding_value(self) -> float:
        return 0.0 if self.padding is None else self.padding


class FeaturesConfig(Section):
    label: str
    numeric: List[str] = []
    categorical: List[str] = []
    # Categorical columns with many values (item or user ids): embedded, not one-hot.
    ids: Dict[str, IdConfig] = {}
    lists: Dict[str, ListConfig] = {}
    ignored: List[str] = []

    @model_validator(mode="after")
    def _disjoint(self) -> "FeaturesConfig":
        seen: Dict[str, str] = {}
        for kind in ("numeric", "categorical", "ids", "lists", "ignored"):
            for name in getattr(self, kind):
                if name == self.label:
                    raise ValueError(f"the label '{name}' is also listed under '{kind}'; "
                                     "a label cannot be a feature")
                if name in seen:
                    raise ValueError(f"'{name}' is listed under both '{seen[name]}' and '{kind}'")
                seen[name] = kind
        if not self.model_inputs:
            raise ValueError("declare at least one numeric, categorical, id or list feature")
        for name, column in self.lists.items():
            if column.vocabulary is not None and column.vocabulary not in self.ids:
                raise ValueError(f"lists.{name}.vocabulary is '{column.vocabulary}', which is not "
                                 f"an id column (features.ids: {sorted(self.ids)})")
        return self

    @property
    def model_inputs(self) -> List[str]:
        return [*self.numeric, *self.categorical, *self.ids, *self.lists]

    @property
    def columns(self) -> List[str]:
        """Every column a data file must have."""
        return [self.label, *self.model_inputs, *self.ignored]


def reader_features(features: FeaturesConfig, list_separator: str, label_kind: str
                    ) -> Dict[str, Any]:
    """The features as the CSV reader reads them: every kind (empty ones too), the list
    separator, the label's kind ("number" or "text")."""
    return {**features.model_dump(mode="json"), "list_separator": list_separator,
            "label_kind": label_kind}


class ReaderSettings(Section):
    """What the CSV reader reads, in the one shape ExampleGen's, DriftCheck's and SkewCheck's
    executors get it (SkewCheck reads a serving span with a copy whose features have no label:
    components/skew_gate/executor.py serving_reader): this model's JSON, rebuilt there with
    model_validate_json (PipelineConfig.reader_settings fills every field: no default here, none
    in the executors)."""
    features: Dict[str, Any]  # PipelineConfig.reader_features
    null_markers: List[str]
    file_pattern: str
    span_window: int = Field(ge=1)
