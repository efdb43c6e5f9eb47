"""``pilotfish logs``: a job's payload output as its pilots shipped it, and where the full files are.

Which attempt: ``--attempt N`` (1 is the first run; every attempt's tail is kept), else the job's latest.
What is shown is text: bytes that are not valid UTF-8 appear as ``\\xNN``, never an error. ``--follow``
prints what a running payload prints as its pilot ships it (every ``log_interval``) and ends when that
attempt ends: its pilot's last shipment, or the job leaving it (requeued, ended without one).
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from taskqueues.errors import ValidationError
from taskqueues.store import STREAMS, AttemptLog, Job, JobState, Store, StreamTail, escaped, shown

__all__ = ["FOLLOW_POLL", "Output", "follow", "output", "parse_streams", "where_lines"]

#: Seconds between two reads of a followed job's log hash.
FOLLOW_POLL = 0.5


def parse_streams(stream: str | None) -> tuple[str, ...]:
    """Short stream names ("out", "err") from ``--stream`` (stdout, stderr or None for both)."""
    if stream is None:
        return tuple(STREAMS.values())
    if stream not in STREAMS:
        raise ValidationError(f"--stream {stream!r} is not a stream: use stdout or stderr")
    return (STREAMS[stream],)


def chosen_attempt(job: Job, attempt: int | None) -> int:
    """The attempt to show: ``attempt`` if the job has had it, else its latest; a ValidationError names
    what does not exist."""
    if attempt is None:
        return job.attempt
    if job.attempt == 0:
        raise ValidationError(f"job {job.id} has not run yet ({job.state.value}): it has no attempt {attempt}")
    if not 1 <= attempt <= job.attempt:
        raise ValidationError(f"job {job.id} has no attempt {attempt}: its attempts are 1 to {job.attempt}")
    return attempt


@dataclass(frozen=True)
class Output:
    """One attempt's output: the kept tails of the streams asked for (missing when it printed nothing)."""

    job: Job
    attempt: int
    log: AttemptLog | None
    streams: tuple[str, ...]

    def tail(self, stream: str) -> StreamTail | None:
        return self.log.streams.get(stream) if self.log is not None else None

    def text(self, stream: str) -> str:
        """The kept tail of ``stream`` as text (non-UTF-8 bytes escaped); empty when nothing was kept."""
        tail = self.tail(stream)
        return shown(tail.data) if tail is not None else ""


def output(store: Store, job: str, attempt: int | None = None, streams: Sequence[str] = ("out", "err")) -> Output:
    """The shipped output of ``job``'s ``attempt`` (default its latest); NotFound for an unknown job,
    ValidationError for an attempt it has not had."""
    record = store.job(job)
    number = chosen_attempt(record, attempt)
    return Output(record, number, store.logs.read(job).get(number), tuple(streams))


def where_lines(out: Output) -> list[str]:
    """What to say besides the output: which attempt, where its files are, what was dropped or not shipped."""
    job = out.job
    if out.attempt == 0:
        return [f"job {job.id} has not run yet ({job.state.value}): no output"]
    head = f"job {job.id} attempt {out.attempt}"
    log = out.log
    if log is None:
        return [f"{head}: no output was shipped (the payload printed nothing, or has not yet)"]
    lines = [f"{head} ran on pilot {log.pilot}" + (" (running)" if log.live else "")]
    for stream in out.streams:
        tail = out.tail(stream)
        if tail is None:
            continue
        name = next(k for k, v in STREAMS.items() if v == stream)
        dropped = f"; the first {tail.dropped} of its {tail.total} bytes are only in that file" if tail.dropped else ""
        lines.append(f"{name}: full tail in {log.host}:{log.path(job.id, stream)}{dropped}")
    return lines


def follow(
    store: Store,
    job: str,
    attempt: int | None = None,
    streams: Sequence[str] = ("out", "err"),
    *,
    poll: float = FOLLOW_POLL,
    sleep: Callable[[float], object] = time.sleep,
) -> Iterator[tuple[str, str]]:
    """(stream, text) as a payload prints it, from what was shipped so far until the attempt ends.

    Without ``attempt``, a job that has not started yet is waited for (its next attempt is followed).
    Bytes the pilot shipped faster than they were read (more than its cap between two reads) are announced
    as skipped.
    """
    record = store.job(job)
    while attempt is None and not record.state.final and record.state not in (JobState.MATCHED, JobState.RUNNING):
        sleep(poll)
        record = store.job(job)
    number = chosen_attempt(record, attempt)
    done = {s: 0 for s in streams}
    decoders = {s: codecs.getincrementaldecoder("utf-8")(errors="backslashreplace") for s in streams}
    while True:
        record = store.job(job)
        ending = record.attempt != number or record.state not in (JobState.MATCHED, JobState.RUNNING)
        log = store.logs.read(job).get(number)
        for stream in streams:
            tail = log.streams.get(stream) if log is not None else None
            if tail is None or tail.total <= done[stream]:
                continue
            start = tail.total - len(tail.data)
            if done[stream] < start:
                yield stream, f"[pilotfish: {start - done[stream]} bytes skipped]\n"
                done[stream] = start
            text = escaped(decoders[stream].decode(tail.data[done[stream] - start :]))
            done[stream] = tail.total
            if text:
                yield stream, text
        if (log is not None and not log.live) or ending:
            for stream in streams:
                rest = escaped(decoders[stream].decode(b"", final=True))
                if rest:
                    yield stream, rest
            return
        sleep(poll)
