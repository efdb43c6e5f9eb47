"""The README and the docs stay true: the settings and catalog examples load, and the tour's commands run.

The tour (the first run, the operator commands, the Python client) is the README's; the settings example is
the operator guide's configuration page, the catalog example its catalog page (``tests.support.pages``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from taskqueues.catalog import Catalog
from taskqueues.settings import Settings
from taskqueues.store import Store
from taskqueues.store.records import JobState
from taskqueues.store.redis_server import free_port
from tests.support.pages import blocks, named, pages
from tests.support.paths import ROOT
from tests.support.pilots import pilot_env
from tests.support.polling import wait_until

pytestmark = pytest.mark.timeout(600)  # the README's runs (each bounded at 300 s)

README = (ROOT / "README.md").read_text()


def test_the_readme_starts_with_the_two_commands_and_ci_runs_the_second() -> None:
    first = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first is not None
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["bash scripts/run.sh", "bash scripts/test.sh"]
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_test_command_also_runs_the_static_checks_and_every_test_has_a_timeout() -> None:
    """CI's command fails on a lint, format or type finding (scripts/lint.sh), and no test can hang it."""
    assert "bash scripts/lint.sh" in (ROOT / "scripts" / "test.sh").read_text()
    lint = (ROOT / "scripts" / "lint.sh").read_text()
    for check in ("ruff check .", "ruff format --check", "mypy --strict"):
        assert check in lint, check
    assert "PACKAGES=(taskqueues matcher pilot)" in lint
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(d.startswith("pytest-timeout") for d in project["project"]["optional-dependencies"]["test"])
    assert project["tool"]["pytest"]["ini_options"]["timeout"] > 0


def test_the_settings_example_is_valid(tmp_path: Path) -> None:
    settings_block = next(b for b in blocks("toml", named("docs/operator/configuration.md")) if "redis_url" in b)
    path = tmp_path / "pilotfish.toml"
    path.write_text(settings_block)
    loaded = Settings.load(path, env={})
    assert loaded.vo == "lhcb" and loaded.sources["vo"] == str(path)


def test_the_catalog_example_is_valid() -> None:
    catalog_block = next(b for b in blocks("toml", named("docs/operator/catalog.md")) if "[sites." in b)
    queues = Catalog.loads(catalog_block, "docs/operator/catalog.md").queues("lhcb")
    assert [q.id for q in queues] == ["LCG.CERN.ch/ce503.cern.ch/long"]
    assert queues[0].params["MaxMemory"] == 4000


def tour_commands() -> list[str]:
    """The commands of the README's tour block (the one that starts with ``pilotfish up``), in order."""
    block = next(b for b in re.findall(r"```sh\n(.*?)```", README, re.S) if "pilotfish up" in b)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.startswith("pilotfish")]


def test_the_first_run_prints_what_the_readme_shows(tmp_path: Path, redis_url: str) -> None:
    shown = re.search(r"```console\n\$ (pilotfish run \S+)\n(.*?)```", README, re.S)
    assert shown is not None
    env = {
        **os.environ,
        "PILOTFISH_STATE_DIR": str(tmp_path),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_CATALOG": "",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", *shown.group(1).split()[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    expected, got = shown.group(2).splitlines(), done.stdout.splitlines()
    pattern = re.compile(r"request \w+ \(small-dag\): 8 (jobs submitted|done)")
    assert pattern.fullmatch(got[0]) and pattern.fullmatch(expected[0]), (got, expected)
    assert pattern.fullmatch(got[-3]) and got[-3].endswith("8 done") and expected[-3].endswith("8 done")
    assert re.fullmatch(r"makespan [\d.]+s \(first start to last end\), [\d.]+s from submission", got[-2])
    assert re.fullmatch(r"pilots \d+, utilisation \d+% of their cores", got[-1])


@pytest.mark.parametrize("via", ["store", "api"])
def test_the_tour_runs_as_the_readme_shows(tmp_path: Path, redis_url: str, via: str) -> None:
    """Every command of the tour, in the README's order, against a real Redis and a real pilot: run by the
    deployment's owner on the store, and (``via`` api) by a user through ``pilotfish serve`` with a token.

    ``pilotfish up`` and ``down`` are stood in for by one pilot this test starts and stops (a 1-core pilot
    whose heartbeat comes every 200 s, so what ``kill`` and ``cancel`` do at once is not a heartbeat's
    doing). The montage's working directory is the test's, and its raw tiles are FIFOs nobody reads: the
    first tile fetch blocks, so there is a running payload to kill and waiting jobs to explain.
    """
    commands = tour_commands()
    assert [c.split()[1] for c in commands] == [
        "up",
        "submit",
        "status",
        "status",
        "jobs",
        "explain",
        "kill",
        "logs",
        "cancel",
        "metrics",
        "down",
    ], commands
    here = tmp_path / "clone"
    (here / "examples").mkdir(parents=True)
    work = tmp_path / "montage"
    work.mkdir()
    for i in range(8):
        os.mkfifo(work / f"raw_{i}.fits")
    text = (ROOT / "examples" / "montage.toml").read_text()
    (here / "examples" / "montage.toml").write_text(
        text.replace('work = "/tmp/pilotfish-examples/montage"', f'work = "{work}"')
    )
    env = {
        **pilot_env(tmp_path / "node", cores=1, mem=4000),
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_CATALOG": "",
        "PILOTFISH_LEASE_SECONDS": "600",
        "PYTHONPATH": str(ROOT),
    }
    store = Store.from_url(redis_url)
    user = env  # what the commands run with (metrics reads the store: an operator's, never through the API)
    server: subprocess.Popen[bytes] | None = None
    if via == "api":
        token = store.tokens.create("tourist", ["default"], "user", 3600)[1]
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "matcher.cli", "serve", "--port", str(port)],
            cwd=here,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        user = {**env, "PILOTFISH_API_URL": f"http://127.0.0.1:{port}", "PILOTFISH_TOKEN": token}
        wait_until(lambda: _answers(port), timeout=60, what="pilotfish serve answering")

    def cli(command: str, ok: bool = True) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "matcher.cli", *command.split()[1:]],
            cwd=here,
            env=env if command.split()[1] == "metrics" else user,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode == 0) == ok, f"{command}: {done.returncode}\n{done.stdout}{done.stderr}"
        return done.stdout

    def state_jobs(listing: str, state: str) -> list[str]:
        line = next(line for line in listing.splitlines() if line.startswith(f"  {state}: "))
        return [item.split()[0] for item in line.split(": ", 1)[1].split(" (+")[0].split(", ")]

    pilot: subprocess.Popen[bytes] | None = None
    request = running = waiting = ""
    try:
        for command in commands:
            verb = command.split()[1]
            if verb == "up":
                pilot = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "matcher.cli",
                        "pilot",
                        "--queue",
                        "local/localhost/local",
                        "--cores",
                        "1",
                        "--idle-timeout",
                        "600",
                        "--lease",
                        "600",
                        "--kill-grace",
                        "1",
                        "--no-events",
                    ],
                    cwd=here,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            elif verb == "submit":
                out = cli(command)
                match = re.fullmatch(r"request (\w+): 42 jobs submitted, ETA \d\d:\d\d:\d\d\n", out)
                assert match, out
                request = match.group(1)
                wait_until(
                    lambda r=request: any(j.state == JobState.RUNNING for j in store.request_jobs(r)),
                    timeout=60,
                    what="a tile fetch running (blocked on its FIFO)",
                )
            elif verb == "status" and len(command.split()) == 2:
                out = cli(command)
                owner = "tourist" if via == "api" else r"\S+"
                line = rf"request {request} 'montage' owner {owner} group default priority 0: 42 jobs \("
                assert re.search(line, out), out
                assert "critical path left" in out and "ETA" in out and "eligible queues: local/localhost/local" in out
            elif verb == "status":
                out = cli(command.replace("REQUEST", request))
                [running] = state_jobs(out, "running")
                waiting = state_jobs(out, "waiting")[0]
                assert len(state_jobs(out, "waiting")) == 5 and "(+2 more)" in out and "blocked: " in out
                assert store.job(running).state == JobState.RUNNING and store.job(waiting).state == JobState.WAITING
            elif verb == "jobs":
                out = cli(command.replace("REQUEST", request)).splitlines()
                assert out[0].split()[:6] == ["ID", "NAME", "REQUEST", "OWNER", "GROUP", "STATE"], out
                assert out[1].split()[0] == running and out[1].split()[5] == "running", out
                assert out[1].split()[4] == "default", out
                shown_states = [line.split()[5] for line in out[2:21]]  # waiting (most urgent first), then blocked
                waits = shown_states.count("waiting")
                assert waits >= 5 and shown_states == ["waiting"] * waits + ["blocked"] * (19 - waits), out
                assert out[21].startswith("... more jobs match: raise --limit (now 20)"), out
            elif verb == "logs":
                argv = command.replace("7", running).split()[1:]
                shown = subprocess.run(
                    [sys.executable, "-m", "matcher.cli", *argv],
                    cwd=here,
                    env=user,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert (shown.returncode, shown.stdout) == (0, ""), shown.stderr  # it printed nothing before the kill
                assert shown.stderr == (
                    f"job {running} attempt 1: no output was shipped (the payload printed nothing, or has not yet)\n"
                )
            elif verb == "explain":
                out = cli(command.replace("12", waiting)).splitlines()
                assert out[0].startswith(f"job {waiting} 'mArchiveGet_") and out[0].endswith(": waiting")
                assert "  eligible queues: local/localhost/local" in out
                assert any(
                    re.fullmatch(
                        r"  pilot local-\d+@\S+ \(local/localhost/local\): "
                        r"free cpu 0 < 1 cores needed",
                        line,
                    )
                    for line in out
                ), out
                assert out[-1].startswith("verdict: no live pilot in an eligible queue has room for it"), out
            elif verb == "kill":
                out = cli(command.replace("7", running))
                assert re.fullmatch(
                    rf"job {running}: kill sent to pilot local-\d+@\S+, which stops its payload now\n", out
                ), out
                wait_until(
                    lambda j=running: store.job(j).state.final,
                    timeout=30,
                    what="the killed payload to end (no heartbeat)",
                )
                assert store.job(running).state == JobState.FAILED and store.job(running).reason == "killed by operator"
                err = subprocess.run(
                    [sys.executable, "-m", "matcher.cli", "kill", running],
                    cwd=here,
                    env=user,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert (err.returncode, err.stderr) == (
                    1,
                    f"pilotfish: error: job {running} has already ended (failed)\n",
                )
            elif verb == "cancel":
                wait_until(
                    lambda r=request: any(j.state == JobState.RUNNING for j in store.request_jobs(r)),
                    timeout=30,
                    what="the pilot on the next tile fetch",
                )
                out = cli(command.replace("REQUEST", request))
                # The 2-core pilot runs 1 or 2 and, its payloads being short, may hold up to 4 more matched
                # ahead (prefetch): each gets the kill request too.
                assert re.fullmatch(
                    rf"request {request}: \d+ jobs cancelled, [1-6] matched or running jobs asked to stop now\n", out
                ), out
                wait_until(
                    lambda r=request: all(j.state.final for j in store.request_jobs(r)),
                    timeout=30,
                    what="every job of the request ended",
                )
                assert "cancelled" in cli(f"pilotfish status {request}")
            elif verb == "metrics":
                samples = {
                    (s.name, tuple(sorted(s.labels.items()))): s.value
                    for family in text_string_to_metric_families(cli(command))
                    for s in family.samples
                }
                assert samples[("pilotfish_store_up", (("vo", "default"),))] == 1
                ended = {
                    dict(labels)["state"]: v
                    for (name, labels), v in samples.items()
                    if name == "pilotfish_jobs_ended_total"
                }
                assert ended["failed"] >= 1 and ended["cancelled"] + ended["dep-failed"] == 42 - 1 - ended["done"]
                assert samples[("pilotfish_matches_total", (("vo", "default"),))] >= 2
            elif verb == "down":
                assert pilot is not None
                pilot.terminate()
                assert pilot.wait(30) == 0
            else:
                pytest.fail(f"the tour has a command this test does not know: {command}")
    finally:
        for process in (pilot, server):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def _answers(port: int) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("example", ["small-dag", "mixed-batch", "montage"])
def test_the_examples_named_in_the_docs_exist(example: str) -> None:
    assert any(f"examples/{example}.toml" in page.read_text() for page in pages())
    assert (ROOT / "examples" / f"{example}.toml").exists()


def test_the_client_example_runs_as_written(tmp_path: Path, redis_url: str) -> None:
    """The README's Python example, run as it is written, against a real Redis and a real pilot."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "matcher.client" in b)
    assert len(block.strip().splitlines()) <= 10
    env = {
        **pilot_env(tmp_path / "node", cores=2, mem=4000),
        "PILOTFISH_STATE_DIR": str(tmp_path / "state"),
        "PILOTFISH_REDIS_URL": redis_url,
        "PILOTFISH_CATALOG": "",
        "PYTHONPATH": str(ROOT),
    }
    pilot = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "matcher.cli",
            "pilot",
            "--queue",
            "local/localhost/local",
            "--cores",
            "2",
            "--idle-timeout",
            "600",
            "--no-events",
            "--workdir",
            str(tmp_path / "pw"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        pilot.terminate()
        pilot.wait(30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("request ") and lines[-1].endswith(" {'done': 3}"), lines
    assert "{'done': 3}" in lines[-5], lines  # the last progress report
    rows = [line.split() for line in lines[-4:-1]]
    assert sorted(r[1:4] for r in rows) == [[f"greet-{i}", "done", "0"] for i in range(3)], rows
    for row in rows:
        assert row[4:] == ["hello", "from", "job", row[0] + ",", "part", row[1][-1]], rows
