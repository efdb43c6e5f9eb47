"""Per-payload $JOBFEATURES, $TMPDIR and environment, exercised by real payload subprocesses."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pilot.mjf import payload as payload_module
from pilot.mjf.payload import PayloadArea, PayloadAreaError
from pilot.mjf.source import FeatureReader


def write_dir(path: Path, values: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    for key, value in values.items():
        (path / key).write_text(value)
    return path


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    machine = write_dir(tmp_path / "site-machine", {"hs06": "400", "jobslots": "8", "shutdowntime": "1000000"})
    job = write_dir(
        tmp_path / "site-job",
        {
            "jobstart_secs": "100000",
            "wall_limit_secs": "86400",
            "cpufactor_lrms": "1.5",
            "allocated_CPU": "8",
            "mem_limit_MB": "32000",
            "disk_limit_GB": "100",
            "cpu_limit_secs": "600000",
        },
    )
    return machine, job


def read_dir(path: Path) -> dict[str, str]:
    return {p.name: p.read_text().strip() for p in path.iterdir()}


SCRIPT = """
set -e
echo "cores=$(cat "$JOBFEATURES/allocated_CPU") omp=$OMP_NUM_THREADS cpu=$PILOTFISH_CPU mem=$PILOTFISH_MEM"
echo "tmp=$PILOTFISH_TMP jobstatus=${JOBSTATUS:-unset} hs06=$(cat "$MACHINEFEATURES/hs06")"
ls -A "$TMPDIR" | wc -l
mkdir -p "$TMPDIR/deep/locked" && echo data > "$TMPDIR/deep/locked/file" && chmod 500 "$TMPDIR/deep/locked"
"""


def test_payload_lifecycle_with_a_real_subprocess(site: tuple[Path, Path], tmp_path: Path) -> None:
    machine, job = site
    features = FeatureReader(str(machine), str(job), env={}, workdir=tmp_path).load()
    area = PayloadArea(tmp_path / "work", features, stop_margin=300)
    assert area.machinefeatures_dir == machine  # a local site directory is passed through, kept live
    # The job's wall requirement is normalised: 5400 reference seconds are 3600 real ones at CPU factor 1.5.
    with area.payload("job 42/attempt 1", cores=2, mem_MB=4000, wall_norm=5400, disk_GB=5.5, start=150000) as sandbox:
        values = read_dir(sandbox.jobfeatures)
        assert values == {
            "allocated_CPU": "2",
            "mem_limit_MB": "4000",
            "wall_limit_secs": "3600",
            "wall_limit_secs_lrms": "5400",
            "cpu_limit_secs": "7200",
            "cpu_limit_secs_lrms": "10800",
            "jobstart_secs": "150000",
            "disk_limit_GB": "5.5",
            "shutdowntime_job": str(100000 + 86400 - 300),
            "cpufactor_lrms": "1.5",
        }
        env = sandbox.env({"PATH": os.environ["PATH"], "JOBSTATUS": "/pilot/status", "HOME": "/root"})
        assert "JOBSTATUS" not in env and env["HOME"] == "/root"
        done = subprocess.run(["/bin/sh", "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
        assert done.stdout.split("\n")[:3] == ["cores=2 omp=2 cpu=2 mem=4000", "tmp=5500 jobstatus=unset hs06=400", "0"]
        assert (sandbox.tmpdir / "deep" / "locked" / "file").exists()
        assert stat.S_IMODE(sandbox.tmpdir.stat().st_mode) == 0o700
        root = sandbox.root
    assert list(sandbox.tmpdir.iterdir()) == []  # what the payload left, read-only corner too, is gone
    assert machine.is_dir()
    area.close()
    assert not root.exists()


@pytest.mark.parametrize("quick", [False, True], ids=["scanned", "quick-reset"])
def test_a_slot_is_handed_out_again_as_a_fresh_one(site: tuple[Path, Path], tmp_path: Path, quick: bool) -> None:
    machine, job = site
    area = PayloadArea(tmp_path / "work", FeatureReader(str(machine), str(job), env={}, workdir=tmp_path).load())
    area.quick_reset = quick
    first = area.payload("a", cores=2, mem_MB=4000, wall_norm=5400, start=150000)
    (first.tmpdir / "left").write_text("x")
    (first.workdir / "out").mkdir()
    first.outputs.write_text("A=1\n")
    (first.jobfeatures / "allocated_CPU").write_text("64\n")  # a payload editing its own $JOBFEATURES
    (first.jobfeatures / "extra").write_text("1\n")
    busy = area.payload("b", cores=1, start=150000)
    assert busy.root != first.root  # a slot in use is never lent twice
    first.cleanup()
    second = area.payload("c", cores=2, mem_MB=None, wall_norm=150, start=150001)
    assert second.root == first.root  # reused...
    assert list(second.tmpdir.iterdir()) == [] and list(second.workdir.iterdir()) == []
    assert not second.outputs.exists()
    values = read_dir(second.jobfeatures)  # ...and indistinguishable from a fresh one
    assert values == read_dir(area.payload("d", cores=2, wall_norm=150, start=150001).jobfeatures)
    assert values["allocated_CPU"] == "2" and values["jobstart_secs"] == "150001"
    assert values["wall_limit_secs"] == "100" and values["wall_limit_secs_lrms"] == "150"
    assert values["mem_limit_MB"] == "32000"
    area.close()
    assert list((tmp_path / "work").iterdir()) == []


def test_a_quick_reset_empties_what_each_payload_leaves_even_at_once(site: tuple[Path, Path], tmp_path: Path) -> None:
    """The quick reset trusts a directory's modification time only as the one it stamped itself: a payload
    that leaves files the very moment its slot was emptied (within one tick of the kernel's clock) or edits
    its $JOBFEATURES in place still hands the next payload a fresh slot; an untouched slot is not read."""
    machine, job = site
    area = PayloadArea(tmp_path / "work", FeatureReader(str(machine), str(job), env={}, workdir=tmp_path).load())
    area.quick_reset = True
    slot = area.payload("first", cores=1, start=150000)
    fresh = read_dir(slot.jobfeatures)
    for i in range(30):
        target = (slot.tmpdir, slot.workdir, slot.root)[i % 3]
        (target / f"left-{i}").write_text("x")
        (slot.jobfeatures / "allocated_CPU").write_text("64\n")  # a payload editing its $JOBFEATURES
        slot.cleanup()
        slot = area.payload(f"p{i}", cores=1, start=150000)
        assert list(slot.tmpdir.iterdir()) == [] and list(slot.workdir.iterdir()) == []
        assert sorted(p.name for p in slot.root.iterdir()) == ["jobfeatures", "tmp", "work"]
        assert read_dir(slot.jobfeatures) == fresh, i
    slot.cleanup()
    for directory in (slot.tmpdir, slot.workdir, slot.root):  # emptied, and stamped as such
        assert directory.stat().st_mtime_ns == payload_module.CLEAN_MTIME_NS
    area.close()


def test_a_slot_that_cannot_be_cleaned_is_replaced(site: tuple[Path, Path], tmp_path: Path) -> None:
    machine, job = site
    area = PayloadArea(tmp_path / "work", FeatureReader(str(machine), str(job), env={}, workdir=tmp_path).load())
    first = area.payload("a", cores=1, start=150000)
    first.tmpdir.rmdir()
    first.tmpdir.write_text("not a directory any more")
    first.cleanup()
    assert not first.root.exists()
    second = area.payload("b", cores=1, start=150000)
    assert second.root != first.root and second.tmpdir.is_dir()
    area.close()


def test_payload_wall_is_capped_by_the_pilot_end_and_defaults_to_the_pilots_share(
    site: tuple[Path, Path], tmp_path: Path
) -> None:
    machine, job = site
    features = FeatureReader(str(machine), str(job), env={}, workdir=tmp_path).load()
    area = PayloadArea(tmp_path / "work", features)
    with area.payload("late", cores=4, wall_norm=50000, start=180000) as sandbox:
        values = read_dir(sandbox.jobfeatures)
        assert values["wall_limit_secs"] == str(186400 - 180000)
        assert values["wall_limit_secs_lrms"] == str(int((186400 - 180000) * 1.5))
        assert values["cpu_limit_secs"] == str(4 * 6400)
        assert values["mem_limit_MB"] == "32000" and values["disk_limit_GB"] == "100"
        env = sandbox.env({})
        assert env["PILOTFISH_MEM"] == "32000" and env["PILOTFISH_TMP"] == "100000"
    with area.payload("big", cores=8, wall_norm=None, start=100000) as sandbox:
        # 8 cores x 86400 s exceeds the pilot's own CPU limit: the payload gets the pilot's.
        assert read_dir(sandbox.jobfeatures)["cpu_limit_secs"] == "600000"


@pytest.fixture
def web_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real HTTP server publishing a directory, as a site publishing MJF by URL would."""
    root = tmp_path / "www"
    root.mkdir()
    handler = partial(QuietHandler, directory=str(root))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_machinefeatures_copy_when_the_site_gives_a_url(web_root: tuple[Path, str], tmp_path: Path) -> None:
    root, url = web_root
    machine = write_dir(root / "machine", {"hs06": "250"})
    job = write_dir(tmp_path / "site-job", {"jobstart_secs": "1000", "wall_limit_secs": "10000"})
    reader = FeatureReader(f"{url}/machine", str(job), env={}, workdir=tmp_path)
    area = PayloadArea(tmp_path / "work", reader.load())
    copy = area.machinefeatures_dir
    assert copy == tmp_path / "work" / "machinefeatures"
    values = read_dir(copy)
    assert values["hs06"] == "250" and values["log_cores"] == str(os.cpu_count())
    assert "shutdowntime" not in values
    sandbox = area.payload("p1", cores=1, start=2000)
    assert read_dir(sandbox.jobfeatures)["shutdowntime_job"] == "11000"
    assert sandbox.env({})["MACHINEFEATURES"] == str(copy)

    # The site announces a shutdown: the pilot refreshes and pushes it to its copy and live payloads.
    (machine / "shutdowntime").write_text("5000")
    area.update(reader.refresh())
    assert read_dir(copy)["shutdowntime"] == "5000"
    assert read_dir(sandbox.jobfeatures)["shutdowntime_job"] == "5000"
    assert read_dir(sandbox.jobfeatures)["wall_limit_secs"] == "3000"
    (machine / "shutdowntime").unlink()  # and withdraws it
    area.update(reader.refresh())
    assert "shutdowntime" not in read_dir(copy)
    assert read_dir(sandbox.jobfeatures)["shutdowntime_job"] == "11000"
    area.close()
    assert not copy.exists() and not sandbox.root.exists()


def test_no_machinefeatures_at_all_still_gives_payloads_a_directory(tmp_path: Path) -> None:
    area = PayloadArea(tmp_path / "work", FeatureReader(None, None, env={}, workdir=tmp_path).load())
    with area.payload("p", cores=1) as sandbox:
        env = sandbox.env({})
        assert Path(env["MACHINEFEATURES"], "phys_cores").is_file()
        assert "shutdowntime_job" not in read_dir(sandbox.jobfeatures)  # an unbounded pilot
    area.close()


def test_payload_needs_cores_and_a_writable_area(site: tuple[Path, Path], tmp_path: Path) -> None:
    machine, job = site
    features = FeatureReader(str(machine), str(job), env={}, workdir=tmp_path).load()
    area = PayloadArea(tmp_path / "work", features)
    with pytest.raises(PayloadAreaError, match="'p0': needs at least one core"):
        area.payload("p0", cores=0)
    (tmp_path / "work").rmdir()
    (tmp_path / "work").write_text("not a directory")  # fails for root too, unlike a chmod
    with pytest.raises(PayloadAreaError, match="'p1': cannot create its directories"):
        area.payload("p1", cores=1)
