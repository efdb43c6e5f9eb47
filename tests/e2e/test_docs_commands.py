"""Every command the documents show runs as written, and the documentation site refuses to build broken.

The README's tour is run for real by ``test_readme.py``. Here, every other command a reader may copy: each
line of a shell block (```` ```sh ````, ```` ```console ````) and each inline ``pilotfish ...`` or
``python scripts/...`` span of README.md, CONTRIBUTING.md and every page under docs/. A ``pilotfish`` line
of a shell block is parsed by the command's own click definition (the command, its options and its
arguments, as the shell would pass them; nothing runs); an inline span names a command and options that
exist. A script, test file or example a document names exists, with the options it is shown with. Commands
that need what this machine lacks (docker, helm, a cluster) have the files they name checked.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from matcher.cli.main import main
from tests.support.pages import blocks, pages
from tests.support.paths import ROOT

README_LINES, README_WIDTH = 250, 200
#: Tools a page may show that this test cannot check here, and why (the skip says so).
UNCHECKABLE = {
    "kubectl": "needs a Kubernetes cluster",
    "curl": "needs the service it asks (and a network)",
    "redis-cli": "needs the operator's server",
    "valkey-cli": "needs the operator's server",
}


def shell_lines() -> Iterator[tuple[str, str]]:
    """(page, command line) for every command of every shell block, continuation lines joined."""
    for page in pages():
        name = str(page.relative_to(ROOT))
        for language in ("sh", "console"):
            for block in blocks(language, page):
                for line in block.replace("\\\n", " ").splitlines():
                    line = line.strip()
                    if language == "console":
                        if not line.startswith("$ "):
                            continue  # what the command printed
                        line = line[2:]
                    if line and not line.startswith("#"):
                        yield name, line


def inline_spans() -> Iterator[tuple[str, str]]:
    """(page, span) for every inline code span that starts a pilotfish command or runs a script."""
    for page in pages():
        name = str(page.relative_to(ROOT))
        prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
        for span in re.findall(r"`([^`]+)`", prose):
            span = " ".join(span.split())
            if re.match(r"pilotfish |python3? scripts/|bash scripts/|python3? -m pytest ", span):
                yield name, span


def _argv(line: str) -> list[str]:
    words = shlex.split(line, comments=True)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value before the command
        words.pop(0)
    return words


def _command(name: str) -> click.Command:
    command = main.get_command(click.Context(main), name)
    assert command is not None, f"no command pilotfish {name}"
    return command


def _options(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def check_pilotfish(argv: list[str]) -> None:
    """The line parses as the shell would pass it: command, options, arguments (nothing runs)."""
    if argv[:1] in (["-v"], ["--verbose"]):
        argv = argv[1:]
    command = _command(argv[0])
    parent = click.Context(main, info_name="pilotfish", obj={})
    command.make_context(argv[0], argv[1:], parent=parent)


def check_script(argv: list[str], where: str) -> None:
    """A script (or a test file) the line runs exists, and names every option the line gives it."""
    paths = [w for w in argv if w.startswith(("scripts/", "tests/", "./helm/", "helm/", "examples/"))]
    assert paths, f"{where}: names no file this test can check"
    for path in paths:
        assert (ROOT / path).exists(), f"{where}: {path} does not exist"
    script = ROOT / paths[0]
    if script.suffix in (".py", ".sh") and paths[0].startswith("scripts/"):
        source = script.read_text()
        for word in argv[argv.index(paths[0]) + 1 :]:
            option = word.split("=")[0]
            if option.startswith("--"):
                assert f'"{option}"' in source or f"{option})" in source or f"{option} " in source, (
                    f"{where}: {paths[0]} has no option {option}"
                )
            elif script.suffix == ".sh" and not word.startswith("-"):
                assert f"{word})" in source, f"{where}: {paths[0]} has no action {word}"


SHELL = sorted(set(shell_lines()))
INLINE = sorted(set(inline_spans()))


def test_the_documents_show_commands() -> None:
    """The collection works: the tour and the catalog page's run are among what is checked."""
    lines = {line for _, line in SHELL}
    assert "pilotfish explain 12" in {line.split("#")[0].strip() for line in lines}
    assert any(line.startswith("PILOTFISH_CATALOG=examples/catalog.toml pilotfish run") for line in lines)
    assert any(span.startswith("python scripts/bench_match.py") for _, span in INLINE)


@pytest.mark.parametrize(("page", "line"), SHELL, ids=[f"{p}:{line[:40]}" for p, line in SHELL])
def test_every_shell_line_runs_as_written(page: str, line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the documents' commands run from the repository's root
    argv = _argv(line)
    where = f"{page}: {line}"
    if argv[0] == "pilotfish":
        try:
            check_pilotfish(argv[1:])
        except click.UsageError as exc:
            pytest.fail(f"{where}: {exc.format_message()}")
    elif argv[0] in ("bash", "python", "python3", "helm"):
        if argv[:3] in (["python3", "-m", "pip"], ["python", "-m", "pip"]):
            assert re.fullmatch(r"-e '?\.\[[\w,]+\]'?|.*", " ".join(argv[3:]))
            return
        check_script(argv, where)
    elif argv[0] == "docker":
        assert (ROOT / "Dockerfile").exists(), where
    elif argv[0] in UNCHECKABLE:
        pytest.skip(f"{where}: {UNCHECKABLE[argv[0]]}")
    else:
        pytest.fail(f"{where}: a kind of command this test does not check: teach it")


@pytest.mark.parametrize(("page", "span"), INLINE, ids=[f"{p}:{s[:40]}" for p, s in INLINE])
def test_every_inline_command_names_what_exists(page: str, span: str) -> None:
    where = f"{page}: `{span}`"
    argv = span.split()
    if argv[0] != "pilotfish":
        check_script(argv, where)
        return
    words = [w for w in argv[1:] if w not in ("-v", "...")]
    if not words or not re.fullmatch(r"[a-z]+", words[0]):
        return  # `pilotfish -v ...`: the group's own option
    command = _command(words[0])
    known = _options(command)
    for word in words[1:]:
        option = word.strip("[]").split("=")[0]
        if option.startswith("-"):
            assert option in known, f"{where}: pilotfish {words[0]} has no option {option}"


def test_the_readme_is_short_and_its_links_resolve() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines: move detail into docs/"
    wide = [i + 1 for i, line in enumerate(lines) if len(line) > README_WIDTH]
    assert not wide, f"README.md lines over {README_WIDTH} characters: {wide}"
    for name in ("README.md", "CONTRIBUTING.md"):
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / name).read_text()):
            if not re.match(r"\w+://", target):
                assert (ROOT / target).exists(), f"{name} links to {target}, which does not exist"


def test_the_docs_build_fails_on_a_broken_link_and_on_a_page_outside_the_toctree(tmp_path: Path) -> None:
    """What CI's build (scripts/docs.sh: sphinx-build -W) refuses, on a copy of the site with both faults."""
    pytest.importorskip("sphinx", reason="the docs extra is not installed (scripts/test.sh installs it)")
    for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "helm/pilotfish/values.yaml"):  # what pages read
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    site = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", site, ignore=shutil.ignore_patterns("_build"))
    with (site / "user" / "shares.md").open("a") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    (site / "operator" / "forgotten.md").write_text("# Forgotten\n\nIn no toctree.\n")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-E",
            "-q",
            "-b",
            "html",
            str(site),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert built.returncode != 0, built.stderr
    assert "no-such-page.md" in built.stderr and "cross-reference target not found" in built.stderr, built.stderr
    assert "forgotten" in built.stderr and "isn't included in any toctree" in built.stderr, built.stderr
