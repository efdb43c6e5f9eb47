"""The wake (issue 31): a pilot listens on its queue's wake shard only while its last match found nothing,
so the store wakes as many idle pilots as jobs entered and never counts a busy one. The pilot runs in this
process (a thread) against a real redis-server; its poll is set a minute apart, so a job it takes within
the test was brought by a wake, not by its poll."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import cast

import pytest

from pilot.agent.observer import Command
from pilot.agent.state import PilotState
from pilot.agent.wake import Wake
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


def _pipe_with_data() -> tuple[int, int]:
    read, write = os.pipe()
    os.write(write, b"x")
    return read, write


def test_the_selector_hands_each_event_to_the_owner_it_had_when_the_batch_was_read() -> None:
    """A handler may close another descriptor of the same batch, and a new one may take its number (a payload
    reaped, the next spawned): the old event still goes to the old owner, never to the new one."""
    wake = Wake(cast(PilotState, None))
    wake.open()
    (r1, w1), (r2, w2) = _pipe_with_data(), _pipe_with_data()
    wake.register(r1, "output", "first")
    wake.register(r2, "output", "second")
    seen: list[tuple[object, int]] = []
    spare: list[int] = []

    def handle(kind: str, data: object, fd: int) -> None:
        seen.append((data, fd))
        if len(seen) == 1:
            os.read(fd, 1)  # its data read: it is quiet in the next batch
            other = r2 if fd == r1 else r1
            wake.unregister(other)
            os.close(other)
            new_read, new_write = os.pipe()
            spare.extend((new_read, new_write))
            assert new_read == other, "the test needs the number reused"
            wake.register(new_read, "output", "new")

    try:
        wake.wait(1.0, handle)
        assert sorted(str(data) for data, _ in seen) == ["first", "second"], seen
        with pytest.raises(ValueError, match=f"descriptor {spare[0]} is already registered"):
            wake.register(spare[0], "output", "again")
        seen.clear()
        os.write(spare[1], b"y")
        wake.wait(1.0, handle)
        assert [data for data, _ in seen] == ["new"]
    finally:
        wake.close()
        for fd in (r1, r2, w1, w2, *spare):
            with contextlib.suppress(OSError):
                os.close(fd)


def test_a_number_freed_under_the_subscription_goes_to_the_next_descriptor(redis_url: str, tmp_path: Path) -> None:
    """An outage's start closes every connection of the store from another thread; the kernel hands the
    subscription's number to the next descriptor (a payload's pipe), which must be watched, not refused."""
    store = Store.from_url(redis_url)
    wake = make_pilot(tmp_path, store, Recorder()).wake
    wake.open()
    try:
        wake.listen()
        assert wake.listening
        watched = wake.watched("work")
        assert watched is not None
        number = watched.fileno()
        sock = wake._pubsub.socket() if wake._pubsub is not None else None
        assert sock is not None
        sock.close()  # as the outage's start does, under the pilot
        read, write = os.pipe()
        if read != number:  # the kernel gives the lowest free number: make sure it is that one
            os.dup2(read, number)
            os.close(read)
            read = number
        wake.register(read, "output", "payload")
        assert not wake.listening, "the subscription that lost its socket is dropped"
        wake.unregister(read, "work")  # what dropping it again would do: the number is the pipe's now
        os.write(write, b"x")
        seen: list[tuple[str, object, int]] = []
        wake.wait(1.0, lambda kind, data, fd: seen.append((kind, data, fd)))
        assert seen == [("output", "payload", read)]
        wake.unregister(read)
        os.close(read)
        os.close(write)
    finally:
        wake.close()
