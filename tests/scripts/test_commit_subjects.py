"""scripts/commit_subjects.py, run as lint.sh runs it, on real git repositories made for each test: a subject
over 72 characters since the base fails, one at the limit passes, history before the base is not judged, and
where it cannot judge (no checkout, a shallow clone, a base not in the history) it says so and passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

SCRIPT = ROOT / "scripts" / "commit_subjects.py"


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    return done.stdout.strip()


def commit(repo: Path, subject: str) -> str:
    git(repo, "commit", "--allow-empty", "-q", "-m", f"{subject}\n\nA body line that may be as long as it likes.")
    return git(repo, "rev-parse", "HEAD")


def check(repo: Path, since: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--repo", str(repo), "--since", since],
        capture_output=True,
        text=True,
        check=False,
    )


def make_repo(path: Path) -> tuple[Path, str]:
    path.mkdir()
    git(path, "init", "-q")
    commit(path, "an old subject from before the rule, long enough to break it by far: it is history now")
    return path, commit(path, "the base")


def test_a_subject_over_72_characters_since_the_base_fails(tmp_path: Path) -> None:
    repo, base = make_repo(tmp_path / "repo")
    commit(repo, "x" * 72)
    assert check(repo, base).returncode == 0
    long = commit(repo, "y" * 73)
    done = check(repo, base)
    assert done.returncode == 1
    assert f"{long[:7]}: subject of 73 characters (at most 72)" in done.stdout, done.stdout
    assert "x" * 72 not in done.stdout and "history now" not in done.stdout


def test_what_it_cannot_judge_it_names_and_passes(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "skipped: not a git checkout" in check(plain, "HEAD").stdout
    repo, base = make_repo(tmp_path / "repo")
    commit(repo, "z" * 80)
    assert "skipped: the base 0123abc is not in this history" in check(repo, "0123abc").stdout
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    done = check(shallow, base)
    assert done.returncode == 0 and "skipped: a shallow clone" in done.stdout, done.stdout
