"""What the outside asks of a pilot: signals (preemption), operator commands, stop requests.

* SIGTERM or SIGINT (a batch system preempting the pilot): every payload goes back to its task queue
  (SIGTERM, SIGKILL after the kill grace) and the pilot stops; a second one SIGKILLs every payload at once.
* Operator commands arrive through the observer (Flower's remote control): ``kill`` a payload, ``drain``
  the pilot (take nothing new, let the running payloads finish) or ``shutdown`` it (Celery's warm shutdown).
* Stop requests are stored for the pilot (``store.pilots``, by ``pilotfish drain`` and the director)
  and read at its heartbeat, which its own channel makes immediate: ``release`` (the director: stop once
  idle), ``drain`` or ``shutdown``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable

from pilot.agent.observer import Command
from pilot.agent.payload import Stop
from pilot.agent.state import PilotState
from taskqueues.store import Outage

log = logging.getLogger("pilot.agent")


class Control:
    """Takes the outside's requests and acts on the running payloads and on whether the pilot takes jobs.

    ``idle`` says whether nothing is running, ending, unreported or on the way from a match: a release
    request waits for it.
    """

    def __init__(self, state: PilotState, idle: Callable[[], bool]) -> None:
        self.state = state
        self._idle = idle
        self._signals: list[int] = []
        self.preempted = False
        self.release_asked = False  # the director asked for a release while the pilot was busy
        # Reading the stop request fails all through an outage: one line when it starts, one when it ends,
        # and no new try before the back-off is over (it was asked at every turn, several times a second).
        self._reads = Outage(log, f"pilot {state.name}: stop request", first=0.5, cap=max(0.5, state.config.lease / 4))
        self._next_read = 0.0

    def on_signal(self, number: int) -> None:
        """Called in the signal handler: noted only, acted on at the next turn."""
        self._signals.append(number)

    @property
    def signalled(self) -> bool:
        return bool(self._signals)

    def handle_signals(self) -> None:
        state = self.state
        while self._signals:
            number = self._signals.pop(0)
            name = signal.Signals(number).name
            if self.preempted:
                log.warning("pilot %s: second %s: killing every payload now", state.name, name)
                for payload in state.slots.running.values():
                    payload.signal(signal.SIGKILL)
                continue
            log.warning("pilot %s: %s: giving every payload back and stopping", state.name, name)
            self.preempted = True
            state.stop_accepting(f"preempted ({name})")
            for payload in state.slots.running.values():
                payload.terminate(Stop(f"pilot preempted ({name})", "requeue"), state.config.kill_grace)

    def handle_commands(self) -> None:
        state = self.state
        try:
            commands: list[Command] = state.observer.commands()
        except Exception:  # an observer must not stop payloads, even when it breaks its promise not to raise
            log.exception("observer.commands() failed")
            return
        for command in commands:
            if command.kind == "kill":
                payload = state.slots.running.get(command.job)
                if payload is None:
                    log.warning("operator asked to kill job %s, which this pilot does not run", command.job)
                    continue
                log.info("operator kills job %s", command.job)
                payload.terminate(Stop(command.reason or "killed by operator", "fail"), state.config.kill_grace)
            elif command.kind == "shutdown":
                self.shut_down(command.reason or "shutdown requested by operator")
            elif command.kind == "drain":
                log.info("operator drains pilot %s", state.name)
                state.stop_accepting(command.reason or "drain requested by operator")
            else:
                log.warning("unknown operator command %r ignored", command.kind)

    def shut_down(self, reason: str) -> None:
        """Celery's warm shutdown, for a pilot: take no new work, give every running payload back to its
        task queue now (SIGTERM, SIGKILL after the kill grace), then exit."""
        state = self.state
        running = state.slots.running
        log.info("operator shuts pilot %s down: giving its %d running payloads back", state.name, len(running))
        state.stop_accepting(reason)
        for payload in running.values():
            if payload.stop is None:
                payload.terminate(Stop("pilot shut down by operator", "requeue"), state.config.kill_grace)

    def obey_stop_request(self, *, reachable: bool = False) -> None:
        """Act on this pilot's stop request in the store, if any (``store.pilots``).
        ``reachable``: another call just went through (the heartbeat), so the read is not held back."""
        state = self.state
        store = state.store
        if not reachable and time.monotonic() < self._next_read:
            return
        try:
            asked = store.pilots.stop_request(state.name)
        except Exception as exc:  # a StoreError (the guard's), or worse; asked again after the back-off
            self._next_read = time.monotonic() + self._reads.failed(exc)
            return
        self._reads.ok()
        self.release_asked = False
        if asked is None or (not state.accepting and asked.mode != "shutdown"):  # a drain may turn into a shutdown
            return
        if asked.mode == "release" and not self._idle():
            self.release_asked = True  # looked at again when the pilot next finds nothing to do
            return
        log.info("pilot %s: %s requested: %s", state.name, asked.mode, asked.reason)
        if asked.mode == "shutdown":
            self.shut_down(asked.reason or "shutdown requested by operator")
        else:
            state.stop_accepting(asked.reason or f"{asked.mode} requested")
        self.forget_stop_request()

    def forget_stop_request(self) -> None:
        """Remove the pilot's stop request: one it acted on, or one that came too late."""
        store = self.state.store
        with contextlib.suppress(Exception):
            store.pilots.forget_stops(self.state.name)
