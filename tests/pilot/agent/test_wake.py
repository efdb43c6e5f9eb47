"""The wake (issue 31): a pilot listens on its queue's wake shard only while its last match found nothing,
so the store wakes as many idle pilots as jobs entered and never counts a busy one. The pilot runs in this
process (a thread) against a real redis-server; its poll is set a minute apart, so a job it takes within
the test was brought by a wake, not by its poll."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pilot.agent.observer import Command
from taskqueues.store import Store
from taskqueues.store.records import JobState
from tests.pilot.agent.test_observer import Recorder, make_pilot
from tests.support.pilots import QUEUE
from tests.support.polling import wait_until
from tests.support.store import job


def listeners(store: Store, channel: str) -> int:
    return int(store.client.pubsub_numsub(channel)[0][1])


def test_a_pilot_listens_for_work_only_while_its_last_match_found_nothing(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    recorder = Recorder()
    pilot = make_pilot(
        tmp_path, store, recorder, idle_timeout=60, backoff_min=60, backoff_max=60, payload_sandbox="none"
    )  # unconfined: its payload watches a file of the test
    channel = store.keys.pilot_wake_channel(QUEUE, pilot.name)
    stopped: list[str] = []
    runner = threading.Thread(target=lambda: stopped.append(pilot.run()), daemon=True)
    runner.start()
    try:
        wait_until(lambda: listeners(store, channel) == 1, timeout=10, what="the idle pilot to listen")
        time.sleep(0.2)  # its first match, on an empty store, is answered: its next poll is a minute away
        go = tmp_path / "go"
        # Every core of the pilot, until the test lets it end
        [whole] = store.submit([job(command=f"until [ -e {go} ]; do sleep 0.05; done", cpu=2)])
        wait_until(lambda: store.job(whole).state == JobState.RUNNING, timeout=10, what="the wake to bring the job")
        # A pilot whose match brought jobs is not idle: it stops listening (its UNSUBSCRIBE and its start's report
        # go on two connections, so the server may take them in either order).
        wait_until(lambda: listeners(store, channel) == 0, timeout=10, what="the busy pilot to stop listening")
        time.sleep(0.3)
        assert listeners(store, channel) == 0, "a pilot with no core free listens again"
        go.touch()
        wait_until(lambda: store.job(whole).state == JobState.DONE, timeout=10, what="the job to end")
        wait_until(lambda: listeners(store, channel) == 1, timeout=10, what="the pilot to listen again")
        time.sleep(0.2)
        [second] = store.submit([job(command="sleep 0.5")])
        recorder.scripted = [(second, Command("drain"))]
        wait_until(lambda: bool(stopped), timeout=10, what="the second wake, and the drain")
    finally:
        if not stopped:
            recorder.scripted = []
            pilot.control.on_signal(15)  # as SIGTERM would: the pilot stops
        runner.join(15)
    assert stopped == ["drain requested by operator"]
    assert [store.job(i).state for i in (whole, second)] == [JobState.DONE, JobState.DONE]
