"""Settings.pilot_stop_margin reaches the pilots: the director passes ``--stop-margin`` and plans with it.

A pilot keeps its stop margin free before its end (``pilot --stop-margin``: seconds to stop payloads and
report), so none of that is time its jobs can use: the director asks the batch system for it on top of what
the jobs need, and a job that would need it is unplaceable on the shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from matcher.submission import Submitter
from pilot.agent.config import PilotConfig
from pilot.director.service import Director, default_pilot_command
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
