"""The run lease (core/run_lease.py) on a local path (core/lease_stores.py LocalStore): one
run at a time holds it, a second is refused naming the holder, the Pusher's check passes only for
the holder, an expired or released lease can be taken, and processes racing for it get one
holder. The same on an S3 server: tests/kubeflow/test_run_lease_s3.py."""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from core import lease_stores, run_lease
from core.run_lease import LeaseError

RUN_A = "11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
RUN_B = "22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
HOUR = 3600.0


class Clock:
    def __init__(self, at: float = 1_800_000_000.0):
        self.at = at

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def pipeline_dir(tmp_path) -> Path:
    return tmp_path / "root" / "nightly"


def _store(pipeline_dir: Path):
    return lease_stores.open_store(run_lease.lease_uri(str(pipeline_dir / RUN_A)))


def test_the_lease_sits_beside_the_runs_and_a_run_is_known_by_its_outputs(pipeline_dir):
    root = f"s3://bucket/tfx/nightly/{RUN_A}"
    uris = [f"{root}/CsvExampleGenDriver/9812/examples"]
    assert run_lease.run_root(uris, "CsvExampleGenDriver") == root
    assert run_lease.lease_uri(root) == "s3://bucket/tfx/nightly/.night-lease.json"
    with pytest.raises(LeaseError, match="cannot tell which run this step is"):
        run_lease.run_root(["s3://bucket/elsewhere/x"], "CsvExampleGenDriver")


def test_a_second_run_is_refused_naming_the_holder_until_the_first_releases(pipeline_dir):
    store, clock = _store(pipeline_dir), Clock()
    a, b = str(pipeline_dir / RUN_A), str(pipeline_dir / RUN_B)
    held = run_lease.take(store, a, 26 * HOUR, clock)
    assert held.run_id == RUN_A
    stored = json.loads((pipeline_dir / ".night-lease.json").read_text())
    assert stored["run_id"] == RUN_A and stored["released_at"] is None
    clock.at += HOUR
    with pytest.raises(LeaseError) as refused:
        run_lease.take(store, b, 26 * HOUR, clock)
    message = str(refused.value)
    assert f"run {RUN_A}" in message and f"this run ({RUN_B}) stops" in message
    assert "pushes nothing" in message and str(pipeline_dir / ".night-lease.json") in message
    run_lease.require(store, a, clock)  # the holder may push
    with pytest.raises(LeaseError, match=f"Pusher of run {RUN_B} refuses to push: run {RUN_A}"):
        run_lease.require(store, b, clock)
    assert not run_lease.release(store, b, clock), "only the holder releases"
    assert run_lease.release(store, a, clock)
    with pytest.raises(LeaseError, match="released .* already"):
        run_lease.require(store, a, clock)
    assert run_lease.take(store, b, 26 * HOUR, clock).run_id == RUN_B


def test_the_holder_taking_again_keeps_its_lease(pipeline_dir):
    """A retried first step of the same run."""
    store, clock = _store(pipeline_dir), Clock()
    first = run_lease.take(store, str(pipeline_dir / RUN_A), HOUR, clock)
    clock.at += 60
    assert run_lease.take(store, str(pipeline_dir / RUN_A), HOUR, clock) == first


def test_an_expired_lease_is_taken_and_its_old_holder_may_not_push(pipeline_dir):
    store, clock = _store(pipeline_dir), Clock()
    a, b = str(pipeline_dir / RUN_A), str(pipeline_dir / RUN_B)
    run_lease.take(store, a, HOUR, clock)
    clock.at += HOUR
    with pytest.raises(LeaseError, match="expired at .*raise kubeflow.run_lease.expiry_s"):
        run_lease.require(store, a, clock)
    assert run_lease.take(store, b, HOUR, clock).run_id == RUN_B
    with pytest.raises(LeaseError, match=f"run {RUN_B} .* holds"):
        run_lease.require(store, a, clock)


def test_no_lease_or_a_broken_one_refuses_with_what_to_do(pipeline_dir):
    store = _store(pipeline_dir)
    with pytest.raises(LeaseError, match="there is no run lease at"):
        run_lease.require(store, str(pipeline_dir / RUN_A))
    pipeline_dir.mkdir(parents=True)
    (pipeline_dir / ".night-lease.json").write_text("{not json")
    with pytest.raises(LeaseError, match="is not a run lease .*delete it"):
        run_lease.take(store, str(pipeline_dir / RUN_A), HOUR)


def _contend(args) -> str:
    folder, run_id, start = args
    start.wait()
    try:
        run_lease.take(_store(Path(folder)), f"{folder}/{run_id}", HOUR)
        return run_id
    except LeaseError:
        return ""


def test_processes_racing_for_a_free_lease_get_one_holder(tmp_path):
    """Eight processes released at once, six times over (without the lock and the read-back,
    two won in about one race of three here)."""
    runs = [f"{n:08d}-0000-4000-8000-000000000000" for n in range(8)]
    context = multiprocessing.get_context("fork")
    with context.Manager() as manager, context.Pool(len(runs)) as pool:
        for race in range(6):
            folder = tmp_path / str(race) / "nightly"
            start = manager.Barrier(len(runs))
            won = [r for r in pool.map(_contend, [(str(folder), r, start) for r in runs]) if r]
            assert len(won) == 1, f"race {race}: {won}"
            assert json.loads((folder / ".night-lease.json").read_text())["run_id"] == won[0]


class OverwrittenAtOnce(lease_stores.LocalStore):
    """A store that ignores the write's condition (an S3 server without If-None-Match), and
    another run's write landing right after this one's."""

    def __init__(self, path: str, other: bytes):
        super().__init__(path)
        self.other = other

    def create(self, body: bytes) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write(body)
        self._write(self.other)
        return True


def test_reading_the_lease_back_leaves_one_holder_where_the_condition_was_ignored(
        pipeline_dir, monkeypatch):
    clock = Clock()
    other = run_lease.Lease(RUN_B, str(pipeline_dir / RUN_B), clock.at, clock.at + HOUR,
                              nonce="b").to_bytes()
    store = OverwrittenAtOnce(run_lease.lease_uri(str(pipeline_dir / RUN_A)), other)
    with pytest.raises(LeaseError, match=f"another run wrote the lease at the same moment "
                                         f"\\(run {RUN_B}"):
        run_lease.take(store, str(pipeline_dir / RUN_A), HOUR, clock)
    # Negative control: without the read-back, run A would go on as the holder of B's lease.
    (pipeline_dir / ".night-lease.json").unlink()
    monkeypatch.setattr(run_lease, "_confirmed", lambda store, mine: mine)
    assert run_lease.take(store, str(pipeline_dir / RUN_A), HOUR, clock).run_id == RUN_A
    assert json.loads((pipeline_dir / ".night-lease.json").read_text())["run_id"] == RUN_B
