"""Settings from defaults, a file and the environment: bad numbers are refused naming the setting and where."""

from __future__ import annotations

import pytest

from taskqueues.errors import ConfigError
from taskqueues.settings import Settings


@pytest.mark.parametrize("value", ["nan", "-1", "abc"])
def test_a_duration_that_is_not_a_number_of_seconds_is_refused_naming_where(value: str) -> None:
    with pytest.raises(ConfigError, match="PILOTFISH_JOB_RETENTION"):
        Settings.load(path="/dev/null", env={"PILOTFISH_JOB_RETENTION": value})


def test_the_job_retention_is_thirty_days_and_zero_keeps_everything() -> None:
    assert Settings.load(path="/dev/null", env={}).job_retention == 30 * 86400
    assert Settings.load(path="/dev/null", env={"PILOTFISH_JOB_RETENTION": "0"}).job_retention == 0
