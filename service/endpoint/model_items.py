"""The serving version's items: assets.extra/retrieval_items.json, which the export writes beside
the SavedModel (components/trainer/export.py): `retrieve`'s vocabulary, most frequent in training
first, and its k. The endpoint checks request item ids against it and answers its first k as the
popularity fallback, so both always belong to the version TF Serving serves.

Which version that is: TF Serving's REST predict response carries no version, so it is the model
status API's newest AVAILABLE version (`GET /v1/models/<name>`), asked every tf_serving.refresh_s
(ModelVersions.refresh). When it changes, that version's file is loaded from
model_versions_path()/<version>/; a missing or bad file keeps the previous version's (logged).
Between a push and the next refresh, retrieve may already answer from the newer version while
`model_version` still names the older one (at most refresh_s).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Awaitable, Callable, FrozenSet, List, Optional, Tuple

ITEMS_FILE = Path("assets.extra") / "retrieval_items.json"
log = logging.getLogger("service.endpoint")


class ItemsError(ValueError):
    """A retrieval_items.json that cannot be served; the message names the file."""


@dataclasses.dataclass(frozen=True)
class ModelItems:
    version: str
    k: int
    items: Tuple[str, ...]
    vocabulary: FrozenSet[str]

    def fallback(self, k: int, excluded: FrozenSet[str] = frozenset()) -> List[str]:
        """The k most frequent items not excluded (skipped ones are replaced by the next)."""
        out = []
        for item in self.items:
            if len(out) == k:
                break
            if item not in excluded:
                out.append(item)
        return out


def load_items(version_dir: Path, feature: str) -> ModelItems:
    """Reads <version_dir>/assets.extra/retrieval_items.json; raises ItemsError naming it."""
    path = Path(version_dir) / ITEMS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ItemsError(f"{path}: {e}") from None
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise ItemsError(f"{path}: not a retrieval items file of schema 1")
    if data.get("feature") != feature:
        raise ItemsError(f"{path}: lists {data.get('feature')!r}, the model retrieves {feature!r}")
    items, k = data.get("items"), data.get("k")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ItemsError(f"{path}: k must be a whole number >= 1, not {k!r}")
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items) \
            or len(items) < k:
        raise ItemsError(f"{path}: items must be at least k={k} non-empty strings")
    return ModelItems(Path(version_dir).name, k, tuple(items), frozenset(items))


def newest_available(status: dict) -> Optional[str]:
    """The newest AVAILABLE version in a model status answer (None when there is none)."""
    versions = [s.get("version") for s in status.get("model_version_status") or []
                if isinstance(s, dict) and s.get("state") == "AVAILABLE"]
    numbers = [int(v) for v in versions if isinstance(v, str) and v.isdigit()]
    return str(max(numbers)) if numbers else None


class ModelVersions:
    """The current ModelItems (None until one loads) and why there is none, or a stale one."""

    def __init__(self, base: Path, feature: str, model_k: int):
        self.base, self.feature, self.model_k = Path(base), feature, model_k
        self.current: Optional[ModelItems] = None
        self.problem = "no model version yet: TF Serving's model status not read"

    async def refresh(self, read_status: Callable[[], Awaitable[dict]]) -> None:
        """Asks TF Serving once; loads the newest AVAILABLE version's items when it changed."""
        try:
            version = newest_available(await read_status())
        except Exception as e:  # noqa: BLE001 (any failure: keep what is loaded)
            self._note(f"TF Serving's model status: {type(e).__name__}: {e}")
            return
        if version is None:
            self._note("TF Serving reports no AVAILABLE version of the model")
            return
        if self.current is not None and version == self.current.version:
            return
        try:
            items = load_items(self.base / version, self.feature)
        except ItemsError as e:  # retried at the next refresh (a push still being copied)
            self._note(f"version {version}'s items not loaded ({e})")
            return
        if items.k != self.model_k:
            log.warning("version %s's items say k=%d, the config's retrieval.k is %d",
                        version, items.k, self.model_k)
        log.info("model version %s: %d items", version, len(items.items))
        self.current, self.problem = items, ""

    def _note(self, problem: str) -> None:
        kept = (f"; keeping version {self.current.version}'s items" if self.current else "")
        if problem + kept != self.problem:
            log.warning("%s%s", problem, kept)
        self.problem = problem + kept
