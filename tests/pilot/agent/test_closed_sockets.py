"""Descriptors closed under the pilot's selector: an outage's start closes every connection of the store
(``Store.drop_connections``), the pilot's exchange connection and its wake subscription among them, and a
closed descriptor leaves the epoll by itself. The reconnection may get the same number back (the kernel hands
out the lowest free one), so what the pilot watches is the socket, not its number. Real redis-server, the
pilot's own :class:`Reports` and :class:`Wake` (the loop's parts), real sockets."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pilot.agent.pilot import Pilot
from taskqueues.errors import StoreUnavailable
from taskqueues.store import PilotOffer, Store
from tests.pilot.agent.test_observer import Recorder, make_pilot
from tests.support.pilots import QUEUE
from tests.support.store import job


@contextlib.contextmanager
def next_descriptor_is(number: int) -> Iterator[None]:
    """Inside the block the kernel hands out ``number`` next (it gives the lowest free number): every free
    number below it is taken meanwhile."""
    taken: list[int] = []
    try:
        while (fd := os.open(os.devnull, os.O_RDONLY)) < number:
            taken.append(fd)
        os.close(fd)
        if fd != number:
            pytest.fail(f"descriptor {number} is not free (the kernel gave {fd})")
        yield
    finally:
        for fd in taken:
            os.close(fd)


def outage_starts(pilot: Pilot) -> None:
    """What the pilot does when a call finds the store unreachable: its outage starts and closes every
    connection of the store, checked-out ones too (``Store.drop_connections`` in a pilot's one thread; here
    by hand too, as a pytest-xdist worker has other threads)."""
    pilot.state.outage.failed(StoreUnavailable("the test's outage"))
    pilot.store.client.connection_pool.disconnect(inuse_connections=True)


def reply_number(pilot: Pilot) -> int:
    """The descriptor number the newest exchange's replies arrive on."""
    sock = pilot.reports.inflight[-1].exchange.socket
    assert sock is not None
    return sock.fileno()


def wait_for(pilot: Pilot, done: Any, timeout: float = 10.0) -> float:
    """Run the pilot's selector as its loop does (replies go to the reports) until ``done()`` or ``timeout``;
    returns the seconds it took. Each wait returns as soon as a descriptor is ready."""
    start = time.monotonic()
    deadline = start + timeout
    while not done() and (left := deadline - time.monotonic()) > 0:
        pilot.wake.wait(left, lambda kind, _data, _fd: pilot.reports.receive_ready() if kind == "reply" else None)
    return time.monotonic() - start


@pytest.fixture
def pilot(redis_url: str, tmp_path: Path) -> Iterator[Pilot]:
    pilot = make_pilot(tmp_path, Store.from_url(redis_url), Recorder(), payload_sandbox="none")
    pilot.state.slots.size(1, 4000, 10000)
    pilot.wake.open()
    try:
        yield pilot
    finally:
        pilot.wake.close()
        pilot.reports.close()


def test_a_reply_on_a_reconnection_that_got_the_closed_sockets_number_wakes_the_pilot(pilot: Pilot) -> None:
    state, reports = pilot.state, pilot.reports
    offer = PilotOffer(state.name, QUEUE, 1, 1000, 0, None)
    reports.send(offer, 1)  # the free core's offer, its reply not read yet
    number = reply_number(pilot)
    outage_starts(pilot)
    state.outage.ok()  # the server answers again
    with next_descriptor_is(number):
        # The one core is offered: the next offer is a prefetch's, on the connection reconnected for it
        reports.send(
            PilotOffer(state.name, QUEUE, 1, 1000, 0, None, running=None, cap=(1, 4000, 10000)), 1, prefetch=True
        )
    assert reply_number(pilot) == number, "the reconnection got the closed socket's number"
    took = wait_for(pilot, lambda: not reports.inflight)
    assert not reports.inflight, f"the reply on the new socket did not wake the pilot in {took:.1f} s"
    assert not state.outage.down, "the exchange the outage had closed, settled after it, started a new outage"
    assert state.next_match < math.inf, "the lost offer's core is offered again"


@pytest.fixture
def running(redis_url: str, tmp_path: Path) -> Iterator[Pilot]:
    """A pilot set up as its run does (subscribed, its signals on its selector), whose loop the test turns."""
    pilot = make_pilot(tmp_path, Store.from_url(redis_url), Recorder(), payload_sandbox="none", command_poll=60)
    pilot._setup()
    try:
        yield pilot
    finally:
        pilot._teardown()


def test_a_turn_of_the_loop_settles_the_exchange_an_outage_closed(running: Pilot) -> None:
    """No reply and no event come for an exchange whose socket an outage's start closed: its offer must not
    wait for the next payload's end (an idle pilot's, for ever) to be made again."""
    state, reports = running.state, running.reports
    state.next_match = 0.0
    reports.fill()  # the free cores' offer, its reply not read yet
    [closed] = reports.inflight
    outage_starts(running)
    state.outage.ok()  # the server answers again
    start = time.monotonic()
    while closed in reports.inflight and time.monotonic() - start < 10:
        running._turn()
    took = time.monotonic() - start
    assert closed not in reports.inflight, f"the closed exchange was still due after {took:.1f} s of the loop"
    assert not state.outage.down, "the exchange the outage had closed, settled after it, started a new outage"


def test_a_subscription_an_outage_closed_is_renewed_not_reconnected_unwatched(running: Pilot) -> None:
    """redis-py reconnects a subscription by itself on its next command (the pilot's subscribe or unsubscribe
    as its matches bring jobs or not), on a socket the selector does not watch; the store counts it among the
    listeners and wakes it instead of a pilot that hears."""
    state, wake, store = running.state, running.wake, running.store
    assert wake.listening
    outage_starts(running)
    state.outage.ok()
    wake.hungry(False)  # a match brought jobs
    wake.hungry(True)  # the next found nothing
    running.heartbeat.beat()  # renews a lost subscription
    assert wake.listening
    state.next_match = math.inf  # its back-off: only a wake brings it to match now
    store.submit([job(queues=(QUEUE,))])
    took = wait_for(running, lambda: state.next_match == 0.0)
    assert state.next_match == 0.0, f"the wake did not reach the pilot in {took:.1f} s"
