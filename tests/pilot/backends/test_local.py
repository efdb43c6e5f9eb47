"""The local backend (real processes on this host) and the conversion to local when a batch system is absent."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import pytest

from pilot.backends import (
    Backend,
    LocalBackend,
    LocalSettings,
    PilotRequest,
    PilotState,
    make_backend,
    reset_conversion_warnings,
    submit_rate,
)
from taskqueues.errors import BackendError
from taskqueues.shapes import Shape
from tests.support.backends import SMALL, BackendContract, Harness, all_final, wait_states
from tests.support.polling import wait_until


def _kill_minus_9(backend: Backend, batch_id: str) -> None:
    assert isinstance(backend, LocalBackend)
    pid = backend.pid(batch_id)
    assert pid is not None, f"{batch_id} is not running"
    os.kill(pid, signal.SIGKILL)


def _make(poll_interval: float) -> Backend:
    del poll_interval  # the local backend answers from memory
    return LocalBackend(LocalSettings(grace=1.0))


class TestLocalContract(BackendContract):
    @pytest.fixture
    def harness(self) -> Harness:
        return Harness("local", _make, _kill_minus_9, LocalBackend().capacity()["cpu"], None)


def alive(pid: int) -> bool:
    """True when ``pid`` runs; a zombie waiting for init to reap it counts as ended."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def spans(directory: Path) -> list[tuple[float, float, str]]:
    """(start, end, name) of each pilot that wrote ``<name>.span`` with ``start end``."""
    out = []
    for path in directory.glob("*.span"):
        start, end = (float(x) for x in path.read_text().split())
        out.append((start, end, path.stem))
    return sorted(out)


def span_command(directory: Path, name: str, seconds: float) -> list[str]:
    """A pilot that records when it ran (wall-clock seconds from date +%s.%N)."""
    return ["/bin/sh", "-c", f"s=$(date +%s.%N); sleep {seconds}; echo $s $(date +%s.%N) > {directory}/{name}.span"]


def max_overlap(intervals: list[tuple[float, float, str]]) -> int:
    events = sorted([(s, 1) for s, _, _ in intervals] + [(e, -1) for _, e, _ in intervals])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def test_running_pilots_never_exceed_capacity(tmp_path: Path) -> None:
    backend = LocalBackend(LocalSettings(capacity={"cpu": 2}))
    try:
        ids = [backend.submit(PilotRequest(f"p{i}", span_command(tmp_path, f"p{i}", 0.6), SMALL, 60)) for i in range(6)]
        peak_cpu = 0

        def sampled_until_all_final() -> bool:
            nonlocal peak_cpu
            peak_cpu = max(peak_cpu, backend.in_use()["cpu"])
            return all_final(backend.states(ids))

        wait_until(sampled_until_all_final, timeout=30, what="every pilot to end")
        assert all(s.state is PilotState.DONE for s in backend.states(ids).values())
        assert peak_cpu == 2
        assert max_overlap(spans(tmp_path)) == 2
    finally:
        backend.close()


def test_user_defined_resource_is_a_limit(tmp_path: Path) -> None:
    backend = LocalBackend(LocalSettings(capacity={"gpu": 1}))
    try:
        ids = [
            backend.submit(
                PilotRequest(f"g{i}", span_command(tmp_path, f"g{i}", 0.4), SMALL, 60, resources={"gpu": "1"})
            )
            for i in range(3)
        ]
        wait_states(backend, ids, all_final)
        assert max_overlap(spans(tmp_path)) == 1
    finally:
        backend.close()


def test_most_urgent_waiting_pilot_starts_first(tmp_path: Path) -> None:
    backend = LocalBackend(LocalSettings(capacity={"cpu": 1}))
    now = time.time()
    try:
        blocker = backend.submit(PilotRequest("blocker", ["sleep", "0.5"], SMALL, 60))
        late = backend.submit(PilotRequest("late", span_command(tmp_path, "late", 0.1), SMALL, 60, start_by=now + 900))
        soon = backend.submit(PilotRequest("soon", span_command(tmp_path, "soon", 0.1), SMALL, 60, start_by=now + 60))
        wait_states(backend, [blocker, late, soon], all_final)
        assert [name for _, _, name in spans(tmp_path)] == ["soon", "late"]
    finally:
        backend.close()


def test_plain_local_refuses_what_it_cannot_hold() -> None:
    backend = LocalBackend(LocalSettings(capacity={"cpu": 2}))
    with pytest.raises(BackendError, match="'gres' is not in the local capacity"):
        backend.submit(PilotRequest("x", ["true"], SMALL, 60, resources={"gres": "gpu:1"}))
    with pytest.raises(BackendError, match="needs cpu=3 but this host has 2"):
        backend.submit(PilotRequest("x", ["true"], Shape("big", cpu=3, mem=1), 60))
    with pytest.raises(BackendError, match="unknown option '--bogus'"):
        backend.submit(PilotRequest("x", ["true"], SMALL, 60, options="--bogus 1"))


def test_batch_ids_are_unique_across_the_local_backends_of_one_process() -> None:
    """A director holds one local backend per converted batch system; pilot names (which leases carry)
    come from the batch ids, so two backends must never hand out the same one (issue 20)."""
    first, second = LocalBackend(LocalSettings(background=False)), LocalBackend(LocalSettings(background=False))
    try:
        ids = [backend.submit(PilotRequest("p", ["true"], SMALL, 60)) for backend in (first, second, first)]
        assert len(set(ids)) == 3, ids
    finally:
        for backend in (first, second):
            backend.shutdown(wait=5)


def test_wall_time_is_enforced_as_lost(tmp_path: Path) -> None:
    backend = LocalBackend(LocalSettings(grace=0.5))
    try:
        batch_id = backend.submit(PilotRequest("slow", ["sleep", "30"], SMALL, wall=1))
        status = wait_states(backend, [batch_id], all_final, timeout=10)[batch_id]
        assert status.state is PilotState.LOST
        assert "wall time exceeded" in status.detail
    finally:
        backend.close()


def test_cancel_kills_the_whole_group_after_the_grace(tmp_path: Path) -> None:
    """The pilot ignores SIGTERM and leaves a child: cancel must still end both, via SIGKILL to the group."""
    backend = LocalBackend(LocalSettings(grace=0.5))
    child_pid = tmp_path / "child.pid"
    script = f"trap '' TERM; sleep 300 & echo $! > {child_pid}; wait; sleep 300"
    try:
        batch_id = backend.submit(PilotRequest("stubborn", ["/bin/sh", "-c", script], SMALL, 600))
        wait_states(backend, [batch_id], lambda s: child_pid.exists() and child_pid.read_text().strip() != "")
        child = int(child_pid.read_text())
        started = time.monotonic()
        backend.cancel([batch_id])
        status = wait_states(backend, [batch_id], all_final, timeout=10)[batch_id]
        assert status.state is PilotState.CANCELLED
        assert time.monotonic() - started >= 0.4, "SIGKILL came before the grace"
        wait_until(lambda: not alive(child), timeout=10, what="the pilot's child to die with the cancel")
    finally:
        backend.close()


def test_submit_rate_measures_and_cleans_up() -> None:
    backend = LocalBackend(LocalSettings(capacity={"cpu": 1}, grace=0.5))
    try:
        rate = submit_rate(backend, 20)
        assert rate > 0
        assert backend.in_use()["cpu"] <= 1
        wait_until(lambda: backend.in_use()["cpu"] == 0, timeout=10, what="submit_rate's pilots to end")
    finally:
        backend.close()


# --- conversion to local -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["slurm", "sge"])
def test_missing_batch_system_converts_to_local_with_one_warning(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    reset_conversion_warnings()
    with caplog.at_level(logging.WARNING, logger="pilot.backends.factory"):
        first = make_backend(kind, {"bin_dir": str(empty_bin), "repo_key": "r:"})
        second = make_backend(kind, {"bin_dir": str(empty_bin)})
    assert isinstance(first, LocalBackend) and first.converted_from == kind
    assert isinstance(second, LocalBackend)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert kind in warnings[0].getMessage() and "not found" in warnings[0].getMessage()


def test_converted_backend_runs_unmappable_pilots_alone(tmp_path: Path) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    reset_conversion_warnings()
    backend = make_backend("slurm", {"bin_dir": str(empty_bin), "local": {"capacity": {"cpu": 2}}})
    assert isinstance(backend, LocalBackend)
    try:
        exclusive = backend.submit(
            PilotRequest("gpu", span_command(tmp_path, "gpu", 0.5), SMALL, 60, resources={"gres": "gpu:1"})
        )
        plain = [
            backend.submit(PilotRequest(f"p{i}", span_command(tmp_path, f"p{i}", 0.5), SMALL, 60)) for i in range(2)
        ]
        # -c 1 maps; -p (partition) cannot: runs alone too.
        partitioned = backend.submit(
            PilotRequest("part", span_command(tmp_path, "part", 0.5), SMALL, 60, options="-c 1 -p long")
        )
        states = backend.states([exclusive, partitioned])
        assert "runs alone" in states[exclusive].detail
        wait_states(backend, [exclusive, partitioned, *plain], all_final, timeout=30)
        intervals = spans(tmp_path)
        alone = {name: (s, e) for s, e, name in intervals if name in ("gpu", "part")}
        for name, (start, end) in alone.items():
            others = [(s, e) for s, e, n in intervals if n != name]
            assert all(e <= start or s >= end for s, e in others), f"{name} shared the host: {intervals}"
        assert max_overlap([i for i in intervals if i[2].startswith("p")]) == 2
    finally:
        backend.close()


def test_converted_backend_maps_sge_priority_without_exclusivity(tmp_path: Path) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    backend = make_backend("sge", {"bin_dir": str(empty_bin)})
    assert isinstance(backend, LocalBackend)
    try:
        batch_id = backend.submit(PilotRequest("prio", ["true"], SMALL, 60, options="-p -5"))
        status = wait_states(backend, [batch_id], all_final)[batch_id]
        assert status.state is PilotState.DONE
    finally:
        backend.close()


def test_converted_backend_carries_the_batch_settings_and_runs_what_they_ask_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Slurm's configured partition/qos/options are not dropped: here they cannot be mapped, so every pilot
    runs alone, and the one warning says so when the backend is made."""
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    reset_conversion_warnings()
    settings = {
        "bin_dir": str(empty_bin),
        "partition": "long",
        "qos": "high",
        "options": "-C avx2",
        "local": {"capacity": {"cpu": 4}},
    }
    with caplog.at_level(logging.WARNING, logger="pilot.backends.factory"):
        backend = make_backend("slurm", settings, where="Site/ce/q")
    assert isinstance(backend, LocalBackend) and backend.carried == {
        "partition": "long",
        "qos": "high",
        "features": "avx2",
    }
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "Site/ce/q" in warning and "every pilot runs alone" in warning, warning
    assert all(f"{k}={v}" in warning for k, v in backend.carried.items()), warning
    try:
        ids = [backend.submit(PilotRequest(f"p{i}", span_command(tmp_path, f"p{i}", 0.4), SMALL, 60)) for i in range(3)]
        assert "cannot map partition=long" in backend.states(ids[:1])[ids[0]].detail
        wait_states(backend, ids, all_final, timeout=30)
        assert max_overlap(spans(tmp_path)) == 1, spans(tmp_path)  # 3 one-core pilots on 4 cores, one at a time
    finally:
        backend.close()


def test_converted_backend_maps_what_the_host_has_and_warns_once_per_backend(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    reset_conversion_warnings()
    with caplog.at_level(logging.WARNING, logger="pilot.backends.factory"):
        # Grid Engine's configured -p only orders pilots: nothing runs alone.
        sge = make_backend("sge", {"bin_dir": str(empty_bin), "options": "-p -5"}, where="A/ce/q")
        again = make_backend("sge", {"bin_dir": str(empty_bin), "options": "-p -5"}, where="A/ce/q")
        other = make_backend("sge", {"bin_dir": str(empty_bin)}, where="B/ce/q")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "A/ce/q" in warnings[0] and "B/ce/q" in warnings[1], warnings
    assert "every pilot runs alone" not in warnings[0], warnings
    assert isinstance(sge, LocalBackend) and sge.carried == {"priority": "-5"}
    try:
        ids = [sge.submit(PilotRequest(f"p{i}", span_command(tmp_path, f"p{i}", 0.6), SMALL, 60)) for i in range(2)]
        wait_states(sge, ids, all_final, timeout=30)
        assert max_overlap(spans(tmp_path)) == 2, spans(tmp_path)
    finally:
        for backend in (sge, again, other):
            backend.close()


def test_unknown_kind_and_wrong_settings_are_errors_not_conversions() -> None:
    with pytest.raises(BackendError, match="unknown backend kind 'pbs'"):
        make_backend("pbs", {})
    with pytest.raises(BackendError, match="unknown setting"):
        make_backend("slurm", {"partion": "x"})
    with pytest.raises(BackendError, match="unknown setting"):
        make_backend("local", {"capacity": {"cpu": 1}, "colour": "red"})
