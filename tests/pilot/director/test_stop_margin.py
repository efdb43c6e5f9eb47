"""Settings.pilot_stop_margin reaches the pilots: the director passes ``--stop-margin`` and plans with it; and
every setting the pilot command has an option for reaches a pilot one way, its command line.

A pilot keeps its stop margin free before its end (``pilot --stop-margin``: seconds to stop payloads and
report), so none of that is time its jobs can use: the director asks the batch system for it on top of what
the jobs need, and a job that would need it is unplaceable on the shape.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from matcher.submission import Submitter
from pilot.agent.command import pilot
from pilot.agent.config import PilotConfig
from pilot.director.launch import default_pilot_command
from pilot.director.service import Director
from taskqueues.context import Context
from taskqueues.settings import LOCAL_REDIS_URL, Settings
from tests.pilot.director.test_local import CATALOG, Placeholders, job, settings_for


def test_the_pilot_command_carries_the_stop_margin(tmp_path: Path, redis_url: str) -> None:
    settings = settings_for(tmp_path, redis_url, CATALOG).with_(pilot_stop_margin=90.0)
    ctx = Context(settings)
    queue = ctx.catalog.queue("L/host/q", settings.vo)
    command = default_pilot_command(queue, queue.shapes[0], 300, settings)
    assert command[command.index("--stop-margin") + 1] == "90.0"


@pytest.mark.parametrize(("margin", "wall"), [(0.0, 180), (90.0, 270), (30.5, 211)])
def test_the_wall_asked_keeps_the_stop_margin(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, margin: float, wall: int
) -> None:
    """A job of wall 2m: 120 s rounded to 60, one step of headroom, and the margin (whole seconds, up)."""
    monkeypatch.chdir(tmp_path)
    ctx = Context(settings_for(tmp_path, redis_url, CATALOG).with_(pilot_stop_margin=margin))
    placeholders = Placeholders()
    director = Director(ctx, pilot_command=placeholders, log_dir=str(tmp_path / "logs"))
    try:
        Submitter.of(ctx).submit([job("two-minutes", "L", wall="2m")], name="margin")
        director.cycle()
        assert [w for _, w in placeholders.walls] == [wall]
    finally:
        director.stop_all()
        director.close()


def test_a_job_that_would_need_the_margin_is_unplaceable(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ctx = Context(settings_for(tmp_path, redis_url, CATALOG).with_(pilot_stop_margin=120.0))
    placeholders = Placeholders()
    director = Director(ctx, pilot_command=placeholders, log_dir=str(tmp_path / "logs"))
    try:
        [job_id] = Submitter.of(ctx).submit([job("long", "L", wall="8m")], name="margin").ids.values()
        reports = director.cycle().queues.values()
        assert placeholders.walls == []
        why = next(r.unplaceable[job_id] for r in reports if job_id in r.unplaceable)
        assert "wall 480 > 420" in why, why  # 600 s shapes less one 60 s step and the 120 s margin
    finally:
        director.stop_all()
        director.close()


def test_the_pilots_defaults_are_the_settings_defaults() -> None:
    defaults, config = Settings(), PilotConfig(queue="s/c/q")
    assert (config.vo, config.prefix, config.lease, config.idle_timeout) == (
        defaults.vo,
        defaults.prefix,
        defaults.lease_seconds,
        defaults.pilot_idle_timeout,
    )
    assert config.redis_url == LOCAL_REDIS_URL  # the pilot's store when none is named (no embedded server to find)


def test_each_setting_reaches_a_pilot_one_way(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the director's pilot command line carries, the pilot's environment does not carry again: parsed
    by the pilot command itself (with no PILOTFISH_ variable around), the line alone gives each value."""
    settings = settings_for(tmp_path, redis_url, CATALOG).with_(vo="lhcb", prefix="site1", pilot_idle_timeout=7.5)
    ctx = Context(settings)
    queue = ctx.catalog.queue("L/host/q", settings.vo)
    argv = default_pilot_command(queue, queue.shapes[0], 300, settings)
    assert argv[2:4] == ["matcher.cli", "pilot"]
    for name in [n for n in os.environ if n.startswith("PILOTFISH_")]:
        monkeypatch.delenv(name)
    parsed = pilot.make_context("pilot", argv[4:]).params
    assert (parsed["vo"], parsed["prefix"], parsed["lease"], parsed["idle_timeout"]) == ("lhcb", "site1", 3.0, 7.5)
    env = Director(ctx)._pilot_env()
    on_the_line = {p.envvar for p in pilot.params if isinstance(p, click.Option) and p.opts[0] in argv}
    assert on_the_line >= {
        "PILOTFISH_VO",
        "PILOTFISH_PREFIX",
        "PILOTFISH_LEASE_SECONDS",
        "PILOTFISH_PILOT_IDLE_TIMEOUT",
    }
    assert not on_the_line & set(env), sorted(on_the_line & set(env))
