"""An unconfined payload's plain command runs as its own program; everything else, and what the kernel
refuses, runs in the shell exactly as before (real spawns, real files)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from pilot.agent import launch
from pilot.agent.payload import Payload
from tests.pilot.agent.test_units import _area, _job, _run


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("true", ["true"]),
        ("  sleep   1 ", ["sleep", "1"]),
        ("./run.sh --in=a,b:c @x 5% +1", ["./run.sh", "--in=a,b:c", "@x", "5%", "+1"]),
        ("/usr/bin/env", ["/usr/bin/env"]),
        ("true --help", None),  # the program prints its help, the builtin does not
        ("false 1", None),
        ("echo -e x", None),  # dash's echo prints "-e x"
        ("cd /tmp", None),
        ("exit 3", None),
        ("if", None),
        (". ./env.sh", None),
        ("X=1 env", None),
        ("ls *", None),
        ("echo $HOME", None),
        ("a; b", None),
        ("a && b", None),
        ("a | b", None),
        ("a > f", None),
        ("a 'b c'", None),
        ('a "b"', None),
        ("a\\ b", None),
        ("~/bin/a", None),
        ("a # comment", None),
        ("a\tb", None),
        ("a\nb", None),
        ("a `b`", None),
        ("(a)", None),
        ("a &", None),
        ("a!", None),
        ("a{1,2}", None),
        ("   ", None),
    ],
)
def test_only_a_simple_command_of_plain_words_skips_the_shell(command: str, expected: list[str] | None) -> None:
    assert launch.words(command) == expected


def _program(directory: Path, name: str, text: str = "#!/bin/sh\nexit 0\n", mode: int = 0o755) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_program_is_found_as_the_shell_finds_it(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _program(first, "tool", mode=0o644)  # not executable: passed over
    (first / "dir").mkdir()  # not a regular file: passed over
    wanted = _program(second, "tool")
    _program(second, "dir")
    env = {"PATH": f"{first}:{second}"}
    assert launch.find_program("tool", env) == str(wanted)
    assert launch.find_program("dir", env) == str(second / "dir")
    assert launch.find_program("missing", env) is None
    assert launch.find_program("tool", {"PATH": f"relative:{second}"}) is None, "left to the shell"
    assert launch.find_program("tool", {"PATH": f":{second}"}) is None, "an empty entry is the cwd"
    assert launch.find_program("true", {}) == shutil.which("true", path=launch.DEFAULT_PATH)
    assert launch.argv("tool -v", env) == (str(wanted), ["tool", "-v"])
    assert launch.argv("missing -v", env) == ("/bin/sh", ["/bin/sh", "-c", "missing -v"])
    assert launch.argv("cd /", env) == ("/bin/sh", ["/bin/sh", "-c", "cd /"])
    assert launch.argv("./tool -v", env) == ("./tool", ["./tool", "-v"]), "as it stands, in the work directory"


def _text(path: Path) -> str:
    """A payload's log: written only when the stream had something."""
    return path.read_text() if path.exists() else ""


def _payload(tmp_path: Path, command: str) -> tuple[Payload, Path]:
    area = _area(tmp_path)
    sandbox = area.payload("17.1", cores=1)
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    return Payload(_job(command), sandbox, log_dir=logs, output_cap=4096), logs


def test_a_plain_command_is_the_payload_process_itself(tmp_path: Path) -> None:
    payload, _ = _payload(tmp_path, "sleep 1")
    payload.spawn(payload.sandbox.env())
    # posix_spawn returns once the child has exec'd: no shell stands between the pilot and the payload
    assert os.readlink(f"/proc/{payload.pid}/exe") == os.path.realpath(shutil.which("sleep") or "")
    assert os.getsid(payload.pid) == payload.pid, "in its own session, as through the shell"
    _run(payload)
    assert payload.result().exit_code == 0
    payload.close()


def test_shell_syntax_still_runs_in_the_shell(tmp_path: Path) -> None:
    payload, _ = _payload(tmp_path, "sleep 1; true")
    payload.spawn(payload.sandbox.env())
    assert os.path.basename(os.readlink(f"/proc/{payload.pid}/exe")) in ("dash", "bash", "sh")
    _run(payload)
    assert payload.result().exit_code == 0
    payload.close()


@pytest.mark.parametrize(
    ("name", "text", "mode", "code", "out", "err"),
    [
        ("script", "echo from the shell\nexit 4\n", 0o755, 4, "from the shell\n", ""),  # no "#!": ENOEXEC
        ("broken", "#!/no/such/interpreter\n", 0o755, 127, "", "not found"),  # ENOENT from the kernel
    ],
)
def test_what_the_kernel_refuses_the_shell_runs_or_reports(
    tmp_path: Path, name: str, text: str, mode: int, code: int, out: str, err: str
) -> None:
    payload, logs = _payload(tmp_path, f"./{name}")
    _program(payload.workdir, name, text, mode)
    env = payload.sandbox.env()
    assert launch.argv(f"./{name}", env)[1] == [f"./{name}"], "the kernel is asked first"
    payload.spawn(env)
    _run(payload)
    assert payload.result().exit_code == code
    assert _text(logs / "17.1.out") == out
    assert err in _text(logs / "17.1.err")
    payload.close()


@pytest.mark.parametrize(
    ("command", "mode", "code", "message"),
    [("no-such-program-here", None, 127, "not found"), ("./data", 0o644, 126, "Permission denied")],
)
def test_a_program_not_found_gets_the_shells_own_status_and_message(
    tmp_path: Path, command: str, mode: int | None, code: int, message: str
) -> None:
    payload, logs = _payload(tmp_path, command)
    if mode is not None:
        _program(payload.workdir, "data", "1 2 3\n", mode)
    payload.spawn(payload.sandbox.env())
    _run(payload)
    assert payload.result().exit_code == code
    assert message in (logs / "17.1.err").read_text()
    payload.close()


def test_the_program_is_looked_up_in_the_payloads_own_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _program(bin_dir, "hello", '#!/bin/sh\necho "hello $1 from $0"\n')
    payload, logs = _payload(tmp_path, "hello world")
    env = {**payload.sandbox.env(), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    payload.spawn(env)
    _run(payload)
    assert payload.result().exit_code == 0
    assert (logs / "17.1.out").read_text() == f"hello world from {bin_dir / 'hello'}\n"
    payload.close()


def test_a_program_found_is_kept_a_second_and_one_gone_is_looked_up_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    _program(second, "tool", "#!/bin/sh\necho second\n")
    payload, logs = _payload(tmp_path / "run", "tool")
    env = {**payload.sandbox.env(), "PATH": f"{first}:{second}:/usr/bin:/bin"}
    assert launch.lookup("tool", env) == str(second / "tool")
    # put earlier in PATH since: not seen while the lookup is kept...
    _program(first, "tool", "#!/bin/sh\necho first\n")
    assert launch.lookup("tool", env) == str(second / "tool")
    # ...but the kept one gone, the kernel refuses it and the shell looks again, finding the new one
    (second / "tool").unlink()
    payload.spawn(env)
    _run(payload)
    assert payload.result().exit_code == 0
    assert _text(logs / "17.1.out") == "first\n"
    payload.close()
    monkeypatch.setattr(launch, "FOUND_SECONDS", 0.0)
    assert launch.lookup("tool", env) == str(first / "tool"), "looked up again once the time has passed"


def test_a_program_killed_by_a_signal_is_reported_killed_by_it_not_as_the_shells_exit_code(tmp_path: Path) -> None:
    """Through ``sh -c`` a program's own SIGSEGV came back as the shell's exit code 139; the program's own wait
    status now says the signal, as bwrap's 128+N is read in a sandbox."""
    payload, _ = _payload(tmp_path, "./crash")
    _program(payload.workdir, "crash", f"#!{sys.executable}\nimport os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    payload.spawn(payload.sandbox.env())
    _run(payload)
    result = payload.result()
    assert result.exit_code is None
    assert result.reason == "killed by signal 11 (SIGSEGV)"
    payload.close()
