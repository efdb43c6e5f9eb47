"""Fail on a commit subject over 72 characters among the commits made since a base (issue 33, part 6).

``python3 scripts/commit_subjects.py [--since REV] [--repo DIR]``: reads ``git log --no-merges --format=%s
REV..HEAD`` (REV defaults to :data:`BASE`, the ``main`` head when the rule was made: history before it is not
rewritten) and prints each subject over :data:`LIMIT` characters with its commit. Exit status 1 if there is
one, else 0. It skips (exit 0, saying why) where it cannot judge: outside a git checkout, in a shallow clone
(the base may be cut off), or when the base is not in the history. ``scripts/lint.sh`` runs it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

#: The ``main`` head when the rule was made; commits after it must keep it.
BASE = "c44e191"
#: The longest subject a reader scans in one line (``git log --oneline``, a 80-column terminal).
LIMIT = 72


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def long_subjects(repo: Path, since: str) -> list[tuple[str, str]] | str:
    """(commit, subject) for every subject over the limit since ``since``, or why it cannot be judged."""
    inside = _git(repo, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return "not a git checkout"
    if _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        return "a shallow clone: the history since the base may be cut off"
    if _git(repo, "rev-parse", "--verify", "--quiet", f"{since}^{{commit}}").returncode != 0:
        return f"the base {since} is not in this history"
    log = _git(repo, "log", "--no-merges", "--format=%h%x00%s", f"{since}..HEAD")
    if log.returncode != 0:
        return f"git log failed: {log.stderr.strip()}"
    lines = (line.split("\0", 1) for line in log.stdout.splitlines() if line)
    return [(commit, subject) for commit, subject in lines if len(subject) > LIMIT]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", default=BASE, help=f"the base commit (default {BASE}, main when the rule began)")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    found = long_subjects(args.repo, args.since)
    if isinstance(found, str):
        print(f"commit_subjects: skipped: {found}")
        return 0
    for commit, subject in found:
        print(f"commit_subjects: {commit}: subject of {len(subject)} characters (at most {LIMIT}): {subject}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
