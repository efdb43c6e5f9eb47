"""Payload output in the store: the tails of each attempt's stdout and stderr, as pilots ship them.

A pilot keeps the last ``output_cap`` bytes of each stream of a payload (``pilot.agent.payload.OutputTail``)
and ships what is new to the job's log hash (``keys.log``) while the payload runs, at most once per
``log_interval``, and a last time when it ends, however it ends (``ship_log.lua``: appended, the last ``cap``
bytes kept). Readers (``pilotfish logs``, :class:`matcher.client.Client`) get raw bytes and the stream's total
size, so they can tell what was dropped, and the pilot's node and log directory, where the files are.

The log hash is written only for a job whose record exists, and only for an attempt the record has had, so
it lives as long as the job record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import NotFound
from .guard import guarded
from .part import Scripted
from .records import text

#: The streams a payload has, by the short name the pilot and the store use.
STREAMS = {"stdout": "out", "stderr": "err"}


@dataclass(frozen=True)
class StreamTail:
    """The kept tail of one stream of one attempt: ``data`` holds the last bytes of ``total``."""

    data: bytes
    total: int

    @property
    def dropped(self) -> int:
        """Bytes the stream had before its kept tail."""
        return max(0, self.total - len(self.data))


@dataclass(frozen=True)
class AttemptLog:
    """One attempt's shipped output and where its pilot keeps the files."""

    attempt: int
    streams: dict[str, StreamTail] = field(default_factory=dict)
    pilot: str = ""
    host: str = ""
    directory: str = ""
    live: bool = False
    at: float = 0.0

    def path(self, job: str, stream: str) -> str:
        """The file the pilot keeps for ``stream`` ("out" or "err") on its node (``pilot.agent.payload``)."""
        return f"{self.directory.rstrip('/')}/{job}.{self.attempt}.{stream}" if self.directory else ""


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escaped(text: str) -> str:
    """``text`` with every character that is not printable (but newline and tab) shown as ``\\xNN``,
    ``\\uNNNN`` or ``\\UNNNNNNNN``: a payload's output cannot move a terminal's cursor or change its
    settings (escape sequences, carriage returns) on the screen of whoever reads it."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else _escape(c) for c in text)


def shown(data: bytes) -> str:
    """Output bytes as text: UTF-8, every byte that is not valid UTF-8 shown as ``\\xNN`` and every control
    character but newline and tab escaped (:func:`escaped`)."""
    return escaped(data.decode("utf-8", errors="backslashreplace"))


class Logs:
    """The payloads' shipped output (``store.logs``)."""

    def __init__(self, store: Scripted) -> None:
        self._store = store
        self.where = store.where

    @guarded("shipping a payload's output")
    def ship(
        self,
        job: str,
        attempt: int,
        pilot: str,
        *,
        cap: int,
        host: str,
        directory: str,
        live: bool,
        chunks: Mapping[str, tuple[bytes, int]],
    ) -> str | None:
        """Append new output of one attempt (stream -> (newest bytes, the stream's total bytes)) to the job's log
        hash; None when stored, else why not (the job is gone, or never had that attempt)."""
        args: list[Any] = [
            job,
            attempt,
            pilot,
            self._store.clock(),
            cap,
            json.dumps({"host": host, "dir": directory}),
            "1" if live else "0",
        ]
        for stream, (data, total) in chunks.items():
            args += [stream, data[-cap:] if cap else b"", total]
        reply = self._store.call_script("ship_log", [self._store.keys.jobs, self._store.keys.log(job)], args)
        return None if text(reply[0]) == "ok" else text(reply[1])

    @guarded("reading a job's output")
    def read(self, job: str) -> dict[int, AttemptLog]:
        """Every attempt's shipped output of ``job`` (attempt -> log); NotFound for an unknown job."""
        pipe = self._store.client.pipeline(transaction=False)
        pipe.hexists(self._store.keys.jobs, job)
        pipe.hgetall(self._store.keys.log(job))
        exists, raw = pipe.execute()
        if not exists:
            raise NotFound(f"no job {job!r}")
        fields = {text(k): v for k, v in raw.items()}
        out: dict[int, AttemptLog] = {}
        for name, value in fields.items():
            number, _, what = name.partition(":")
            if what != "meta" or not number.isdigit():
                continue
            try:
                meta = json.loads(value)
            except ValueError:
                meta = {}
            meta = meta if isinstance(meta, dict) else {}
            attempt = int(number)
            streams = {}
            for stream in STREAMS.values():
                data = fields.get(f"{attempt}:{stream}")
                if data is not None:
                    total = fields.get(f"{attempt}:{stream}:n")
                    streams[stream] = StreamTail(bytes(data), int(total) if total is not None else len(data))
            out[attempt] = AttemptLog(
                attempt,
                streams,
                str(meta.get("pilot", "")),
                str(meta.get("host", "")),
                str(meta.get("dir", "")),
                bool(meta.get("live")),
                float(meta.get("at") or 0),
            )
        return out
