"""Attacks on credentials, each tried for real and each refused.

* On the README's default deployment (``pilotfish up``, embedded server, local pilots): no process of the
  deployment carries a password in its environment or command line, a pilot's one-use credential file is gone
  once it runs, Flower answers 401 to a page or API request without its login, and with the login revoke +
  terminate of a running payload ends its job ``failed``; the server's log has no ACL deprecation warning.
* A pilot (and its guardian) are non-dumpable: another process of the same user can read neither its
  environment, nor its memory, nor its descriptors (a process with CAP_SYS_PTRACE still can: the test runs both
  sides as the test's user without capabilities, through ``setpriv``).
* A pilot's ACL user cannot publish on Celery's broadcast channel (no shutdown of another pilot, of any
  community), run Lua of its own, or fill the broker's tables.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import redis

from pilot.celery_events import task_uuid
from taskqueues import credentials, embedded
from taskqueues.context import Context
from taskqueues.settings import Settings
from taskqueues.store import access
from taskqueues.store.records import JobState
from taskqueues.store.redis_server import RedisServer, free_port
from tests.support.paths import ROOT
from tests.support.polling import wait_until

pytestmark = pytest.mark.timeout(600)

#: The same user as the test (root here), without any capability (CAP_SYS_PTRACE and CAP_DAC_OVERRIDE included),
#: and kept without them across exec: what any other process of the deployment's user is.
SAME_USER = ("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--securebits=+noroot,+noroot_locked")


def cli(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "matcher.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"pilotfish {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


@dataclass
class Deployment:
    env: dict[str, str]
    state: Path
    flower: str
    up: str

    def context(self) -> Context:
        return Context(Settings.load("/dev/null", env=self.env))

    def http(self, path: str, login: str | None, method: str = "GET") -> int:
        return self.call(path, login, method)[0]

    def call(self, path: str, login: str | None, method: str = "GET") -> tuple[int, str]:
        request = urllib.request.Request(self.flower + path, data=b"" if method == "POST" else None, method=method)
        if login is not None:
            request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode(errors="replace")

    def login(self) -> str:
        return (self.state / "flower" / "login").read_text().strip()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """``pilotfish up`` as the README runs it (embedded server, local pilots with events), stopped at the end."""
    work = tmp_path_factory.mktemp("deployment")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PILOTFISH_", "CELERY_", "FLOWER_"))}
    env.update(
        PILOTFISH_STATE_DIR=str(work / "state"),
        PILOTFISH_FLOWER_PORT=str(port),
        PILOTFISH_API_PORT=str(free_port()),
        PILOTFISH_DIRECTOR_INTERVAL="1",
        PILOTFISH_PILOT_EVENTS="true",
        PYTHONPATH=str(ROOT),
    )
    up = cli(["up"], env, timeout=180).stdout
    try:
        yield Deployment(env, work / "state", f"http://127.0.0.1:{port}", up)
    finally:
        subprocess.run(
            [sys.executable, "-m", "matcher.cli", "down"], cwd=ROOT, env=env, capture_output=True, timeout=180
        )


def submit(deployment: Deployment, command: str, name: str) -> str:
    workflow = deployment.state.parent / f"{name}.toml"
    workflow.write_text(f'name = "{name}"\n[[jobs]]\nname = "{name}"\ncommand = {json.dumps(command)}\n')
    ids: dict[str, str] = json.loads(cli(["submit", "--json", str(workflow)], deployment.env).stdout)["ids"]
    return ids[name]


def deployment_processes(state: Path) -> list[psutil.Process]:
    marker = str(state.resolve())
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("PILOTFISH_DEPLOYMENT") == marker:
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_no_process_of_the_deployment_holds_a_password(deployment: Deployment) -> None:
    job = submit(deployment, "sleep 30", "holder")
    ctx = deployment.context()
    wait_until(lambda: ctx.store.job(job).state is JobState.RUNNING, timeout=120, what="the job to run")
    passwords = json.loads((deployment.state / "redis" / "credentials.json").read_text())
    secrets = [passwords["control"], *passwords["pilots"].values()]
    processes = deployment_processes(deployment.state)
    names = {" ".join(p.cmdline()[1:4]) for p in processes}
    assert any("pilot" in n for n in names) and any("director" in n for n in names), names
    for process in processes:
        text = "\0".join(process.cmdline()) + "\0".join(f"{k}={v}" for k, v in process.environ().items())
        assert not any(secret in text for secret in secrets), f"a password in {process.cmdline()}"
    # The pilot took and removed its one-use credential file.
    assert list((deployment.state / "run" / "pilot-credentials").glob("pilot-*.json")) == []
    secrets_file = deployment.state / "run" / "secrets.json"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600


def test_flower_needs_its_login_and_with_it_terminates_a_payload(deployment: Deployment) -> None:
    login_file = deployment.state / "flower" / "login"
    assert str(login_file) in deployment.up
    assert stat.S_IMODE(login_file.stat().st_mode) == 0o600
    login = deployment.login()
    assert login in cli(["flower", "--login"], deployment.env).stdout
    for path in ("/", "/workers", "/tasks", "/api/workers", "/api/tasks"):
        assert deployment.http(path, None) == 401, path
        assert deployment.http(path, "pilotfish:wrong") == 401, path
    assert deployment.http("/api/workers?refresh=0", login) == 200
    assert deployment.http("/", login) == 200

    job = submit(deployment, "sleep 120", "victim")
    ctx = deployment.context()
    wait_until(lambda: ctx.store.job(job).state is JobState.RUNNING, timeout=120, what="the victim to run")
    attempt = ctx.store.job(job).attempt
    tid = task_uuid(ctx.settings.vo, job, attempt)
    assert deployment.http(f"/api/task/revoke/{tid}?terminate=true", None, "POST") == 401
    assert ctx.store.job(job).state is JobState.RUNNING
    assert deployment.http(f"/api/task/revoke/{tid}?terminate=true", login, "POST") == 200
    wait_until(lambda: ctx.store.job(job).state is JobState.FAILED, timeout=60, what="the revoked job to fail")


def test_flower_inspects_and_drains_a_pilot_that_answers_as_its_acl_user(deployment: Deployment) -> None:
    """The pilots' replies (inspect, cancel-consumer) reach Flower through the reply queues their user may
    write, and the server refused the pilots nothing on the way."""
    job = submit(deployment, "sleep 15", "drained")
    ctx = deployment.context()
    wait_until(lambda: ctx.store.job(job).state is JobState.RUNNING, timeout=120, what="the job to run")
    pilot = str(ctx.store.job(job).pilot)

    def workers() -> dict[str, dict[str, object]]:
        status, body = deployment.call("/api/workers?refresh=1", deployment.login())
        assert status == 200, body
        found: dict[str, dict[str, object]] = json.loads(body)
        return found

    seen = wait_until(lambda: workers().get(pilot), timeout=60, what=f"Flower to inspect pilot {pilot}")
    [queue] = [str(q["name"]) for q in seen["active_queues"]]  # type: ignore[attr-defined]
    status, body = deployment.call(
        f"/api/worker/queue/cancel-consumer/{pilot}?queue={queue}", deployment.login(), method="POST"
    )
    assert status == 200 and "draining" in body, body
    wait_until(lambda: ctx.store.job(job).state is JobState.DONE, timeout=120, what="the drained pilot's job")
    control = redis.Redis.from_url(ctx.redis_url)
    denied = [e for e in control.execute_command("ACL", "LOG", "100") if b"auth" not in e]
    assert denied == [], f"a pilot or the control plane was refused something: {denied}"


def test_the_server_log_has_no_acl_deprecation(deployment: Deployment) -> None:
    deployment.context().pilot_redis_url  # noqa: B018 - the pilot user is (re)made and saved
    users = (deployment.state / "redis" / "users.acl").read_text()
    assert "fcall|" not in users and "eval" not in users and "(" in users, users
    # A restart reads the saved users file (the pilot user's selectors included): no warning either.
    assert embedded.stop(deployment.state)
    embedded.ensure(deployment.state)
    log = (deployment.state / "redis" / "redis.log").read_text()
    assert log.count("Ready to accept connections") >= 2 and "misuse of ACL" not in log, log[-2000:]


def test_up_on_a_configured_redis_keeps_its_urls_in_the_secrets_file(tmp_path: Path) -> None:
    """URL settings given to ``up`` through its environment reach its parts through run/secrets.json only:
    no part holds a password in its environment or argv, and they work (a job runs)."""
    server = RedisServer(tmp_path / "redis").start()
    try:
        admin = redis.Redis(port=server.port)
        control_pw, pilot_pw = access.new_password(), access.new_password()
        access.apply(admin, access.CONTROL_USER, control_pw, access.control_rules())
        access.apply(admin, access.pilot_user("default"), pilot_pw, access.pilot_rules("pf", "default"), broker=True)
        base = f"redis://127.0.0.1:{server.port}/0"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PILOTFISH_", "CELERY_", "FLOWER_"))}
        env.update(
            PILOTFISH_STATE_DIR=str(tmp_path / "state"),
            PILOTFISH_FLOWER_PORT=str(free_port()),
            PILOTFISH_API_PORT=str(free_port()),
            PILOTFISH_DIRECTOR_INTERVAL="1",
            PILOTFISH_REDIS_URL=access.with_credentials(base, access.CONTROL_USER, control_pw),
            PILOTFISH_PILOT_REDIS_URL=access.with_credentials(base, access.pilot_user("default"), pilot_pw),
            PYTHONPATH=str(ROOT),
        )
        state = tmp_path / "state"
        try:
            assert "redis: external" in cli(["up"], env, timeout=180).stdout
            deployment = Deployment(env, state, "", "")
            job = submit(deployment, "true", "external")
            ctx = deployment.context()
            wait_until(lambda: ctx.store.job(job).state is JobState.DONE, timeout=120, what="the job to run")
            processes = deployment_processes(state)
            assert len(processes) >= 4, [p.cmdline() for p in processes]
            for process in processes:
                text = "\0".join(process.cmdline()) + "\0".join(f"{k}={v}" for k, v in process.environ().items())
                assert control_pw not in text and pilot_pw not in text, f"a password in {process.cmdline()}"
            # A pilot that never started (cancelled while queued) leaves its file: down removes it.
            never = credentials.write_pilot_file(credentials.pilot_files_dir(state), {"PILOTFISH_REDIS_URL": "x"})
            cli(["down"], env, timeout=180)
            assert not never.exists() and list(credentials.pilot_files_dir(state).iterdir()) == []
            kept = json.loads((state / "run" / "secrets.json").read_text())
            assert kept == {
                "redis_url": env["PILOTFISH_REDIS_URL"],
                "pilot_redis_url": env["PILOTFISH_PILOT_REDIS_URL"],
            }
        finally:
            subprocess.run(
                [sys.executable, "-m", "matcher.cli", "down"], cwd=ROOT, env=env, capture_output=True, timeout=180
            )
    finally:
        server.stop()


def test_config_shows_urls_without_their_passwords(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PILOTFISH_")},
        "PILOTFISH_STATE_DIR": str(tmp_path),
        "PILOTFISH_REDIS_URL": "redis://pf-control:s3cr3t-c@10.0.0.1:6379/0",
        "PILOTFISH_PILOT_REDIS_URL": "redis://pf-pilot-default:s3cr3t-p@10.0.0.1:6379/0",
        "PILOTFISH_BROKER_URL": "sentinel://pf-control:s3cr3t-b@10.0.0.2:26379/0",
    }
    for args in (["config"], ["config", "--json"]):
        out = cli(args, env).stdout
        assert "s3cr3t" not in out and "pf-control@10.0.0.1:6379" in out, out


#: Without capabilities bwrap cannot make its namespaces here (no unprivileged user namespaces): this pilot runs
#: no payload, so it needs no sandbox.
LIMITS = ("--cores", "1", "--mem", "100", "--tmp", "100", "--idle-timeout", "30", "--payload-sandbox", "none", "-v")


def as_same_user(argv: list[str], **kwargs: object) -> subprocess.Popen[str]:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop the test's capabilities")
    return subprocess.Popen([*SAME_USER, *argv], text=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def peek(pid: int) -> dict[str, str]:
    """What another process of the same user gets when it reads ``pid``'s environment, descriptors and memory."""
    script = (
        "import json, os, sys\n"
        "pid = sys.argv[1]\nout = {}\n"
        "for what, read in (('environ', lambda: open(f'/proc/{pid}/environ', 'rb').read().decode()),"
        " ('fd', lambda: os.readlink(f'/proc/{pid}/fd/0')),"
        " ('mem', lambda: open(f'/proc/{pid}/mem', 'rb').read(1).hex())):\n"
        "    try:\n        out[what] = read()\n    except OSError as exc:\n        out[what] = 'denied: ' + str(exc)\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [*SAME_USER, sys.executable, "-c", script, str(pid)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, str] = json.loads(done.stdout)
    return result


def test_a_pilot_and_its_guardian_are_closed_to_their_own_user(redis_url: str, tmp_path: Path) -> None:
    """A real pilot, its Redis URL handed in a one-use file: another process of its user reads nothing of it or
    of its guardian; a process that did not mark itself can be read (the check can fail)."""
    secret_url = redis_url  # the test server has no password: the file's use is what is checked here
    handed = credentials.write_pilot_file(tmp_path / "creds", {"PILOTFISH_REDIS_URL": secret_url})
    env = {k: v for k, v in os.environ.items() if not k.startswith("PILOTFISH_")}
    env.update(
        PYTHONPATH=str(ROOT), HOME=str(tmp_path), PILOTFISH_CREDENTIALS_FILE=str(handed), MARK="visible-to-its-user"
    )
    err = tmp_path / "pilot.err"
    with open(err, "w") as stderr:
        pilot = as_same_user(
            [
                sys.executable,
                "-m",
                "pilot.agent.command",
                "--queue",
                "site/ce/q",
                "--workdir",
                str(tmp_path / "w"),
                *LIMITS,
            ],
            cwd=str(tmp_path),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    plain = as_same_user([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        wait_until(lambda: not handed.exists() or pilot.poll() is not None, timeout=60, what="the pilot to start")
        assert pilot.poll() is None, err.read_text()  # it connected with the URL of the file
        guardians = wait_until(
            lambda: (
                pilot.poll() is None
                and [c for c in psutil.Process(pilot.pid).children() if "pilot.agent.guardian" in c.cmdline()]
            ),
            timeout=60,
            what=lambda: f"the pilot's guardian: {err.read_text()}",
        )
        assert guardians, err.read_text()
        for pid in (pilot.pid, guardians[0].pid):
            seen = peek(pid)
            assert all(value.startswith("denied: ") for value in seen.values()), seen
        assert "MARK=visible-to-its-user" in peek(plain.pid)["environ"]
    finally:
        for process in (pilot, plain):
            process.send_signal(signal.SIGKILL)
            process.wait(10)


def test_a_pilot_user_cannot_steer_other_pilots_or_run_lua(tmp_path: Path) -> None:
    """The broadcast channel carries Flower's shutdown, revoke and drain: a pilot listens there, never publishes."""
    state = tmp_path / "state"
    try:
        server = embedded.ensure(state)
        control = redis.Redis.from_url(embedded.control_url(server))
        pilot = redis.Redis.from_url(
            embedded.pilot_url(state, control, embedded.control_url(server), prefix="pf", vo="lhcb")
        )
        listening = control.pubsub()
        listening.psubscribe("/0.celery.pidbox")
        listening.get_message(timeout=5)
        shutdown = json.dumps({"method": "shutdown", "arguments": {}, "destination": None})
        with pytest.raises(redis.exceptions.NoPermissionError):
            pilot.publish("/0.celery.pidbox", shutdown)
        assert listening.get_message(timeout=1) is None, "nothing reached the pilots' channel"
        listening.close()
        for command in (("EVAL", "while true do end", "0"), ("SCRIPT", "LOAD", "return 1")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                pilot.execute_command(*command)
        for table in ("_kombu.binding.celeryev", "_kombu.binding.celery.pidbox", "_kombu.binding.reply.celery.pidbox"):
            with pytest.raises(redis.exceptions.NoPermissionError):
                pilot.sadd(table, "x" * 1_000_000)  # no table of kombu's to fill
        assert access.pilot_user("lhcb") in {e.decode().split()[1] for e in control.execute_command("ACL", "LIST")}
    finally:
        embedded.stop(state)


def test_down_finds_the_non_dumpable_processes_its_user_cannot_read(tmp_path: Path) -> None:
    """A sealed process's environment (and so its deployment marker) is closed to its own user: ``down``'s
    search for leftover processes, run without capabilities, still finds it through the list it joined."""
    state = (tmp_path / "state").resolve()
    (state / "run").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), credentials.DEPLOYMENT_VARIABLE: str(state)}
    sleep = "import time; time.sleep(60)"
    sealed = as_same_user([sys.executable, "-c", f"from taskqueues.credentials import seal; seal(); {sleep}"], env=env)
    plain = as_same_user([sys.executable, "-c", sleep], env=env)
    quick = as_same_user([sys.executable, "-c", "from taskqueues.credentials import seal; seal()"], env=env)
    search = (
        "from matcher.cli.deploy import orphans\nfrom taskqueues.context import Context\n"
        "from taskqueues.settings import Settings\n"
        f"print(sorted(p.pid for p in orphans(Context(Settings(state_dir={str(state)!r})))))"
    )
    try:
        assert quick.wait(30) == 0
        wait_until(lambda: (credentials.sealed_dir(state) / str(sealed.pid)).exists(), timeout=30, what="the list")
        assert not (credentials.sealed_dir(state) / str(quick.pid)).exists(), "an ended process leaves the list"
        assert "denied" in peek(sealed.pid)["environ"]
        done = subprocess.run(
            [*SAME_USER, sys.executable, "-c", search], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == sorted([sealed.pid, plain.pid])
    finally:
        for process in (sealed, plain):
            process.kill()
            process.wait(10)
