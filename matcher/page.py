"""A page per request (issue 28, part 6): one request as HTML with inline SVG pictures, no script and no outside
resource. Its progress over time (jobs ended per time bucket, from the jobs' end times), its jobs by state (counts
and a coloured bar), its graph grouped by rule (the jobs of one rule are one node with its counts by state; an
edge wherever a job of one rule depends on a job of another; nodes laid out in layers by topological depth), and
its jobs, each linking to its own page (its events and the kept tail of its output).

Everything here is pure: it reads :class:`~taskqueues.store.Job` records and returns text; every name that comes
from a user (request, rule, job names, reasons, output) is escaped. The API's :mod:`matcher.api.routes.page`
serves it.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from urllib.parse import quote

from taskqueues.store import Job, JobEvent

from .calls import LogView
from .status import STATE_ORDER, RequestStatus

__all__ = ["COLOURS", "RuleNode", "job_page", "progress", "request_page", "rule_graph"]

#: A colour per job state (the bar, the graph's nodes, the legend).
COLOURS: dict[str, str] = {
    "blocked": "#b0b0b0",
    "releasing": "#c7b7e8",
    "held": "#e0c060",
    "waiting": "#8fb8de",
    "matched": "#5da5da",
    "running": "#2b7bba",
    "done": "#4caf50",
    "failed": "#d9534f",
    "cancelled": "#777777",
    "dep-failed": "#f0a060",
}

#: The most jobs the page lists (the counts, chart and graph cover all of them).
LISTED = 500
#: Time buckets of the progress chart.
BUCKETS = 24
#: A rule name for jobs that have none.
NO_RULE = "(no rule)"

STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:2px 8px;text-align:left}
.counts span{display:inline-block;margin-right:1em}
.swatch{display:inline-block;width:.8em;height:.8em;margin-right:.3em}
pre{background:#f6f6f6;padding:.5em;overflow-x:auto;max-height:30em}
svg text{font-family:sans-serif}
"""


def _state(job: Job) -> str:
    return job.state.value


def _rule(job: Job) -> str:
    return job.rule or NO_RULE


def _document(title: str, body: Iterable[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(title)}</title>",
            f"<style>{STYLE}</style></head><body>",
            *body,
            "</body></html>",
        ]
    )


def _stamp(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + " UTC"


# --- progress over time --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """Jobs ended per time bucket: ``start`` and ``width`` (seconds) of the buckets, and per bucket the count of
    jobs that ended in it by final state."""

    start: float
    width: float
    buckets: list[Counter[str]]

    @property
    def ended(self) -> int:
        return sum(sum(b.values()) for b in self.buckets)


def progress(jobs: Sequence[Job], submitted: float, now: float, buckets: int = BUCKETS) -> Progress:
    """The jobs' end times in ``buckets`` equal buckets from the submission to the last end (or ``now`` while
    some are unfinished)."""
    ends = [(j.ended, _state(j)) for j in jobs if j.state.final and j.ended]
    last = max((t for t, _ in ends), default=submitted)
    if any(not j.state.final for j in jobs):
        last = max(last, now)
    start = min([submitted, *(t for t, _ in ends)]) if ends else submitted
    width = max(last - start, 1.0) / buckets
    counts: list[Counter[str]] = [Counter() for _ in range(buckets)]
    for t, state in ends:
        counts[min(int((t - start) / width), buckets - 1)][state] += 1
    return Progress(start, width, counts)


def _progress_svg(p: Progress) -> str:
    w, h, left, bottom = 640, 180, 40, 24
    tallest = max((sum(b.values()) for b in p.buckets), default=0) or 1
    bar = (w - left) / len(p.buckets)
    out = [
        f'<svg id="progress" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
        f'aria-label="jobs ended per time bucket">',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w}" y2="{h - bottom}" stroke="#444"/>',
        f'<text x="{left - 4}" y="12" text-anchor="end" font-size="10">{tallest}</text>',
        f'<text x="{left - 4}" y="{h - bottom}" text-anchor="end" font-size="10">0</text>',
        f'<text x="{left}" y="{h - 6}" font-size="10">{escape(_stamp(p.start))}</text>',
        f'<text x="{w}" y="{h - 6}" text-anchor="end" font-size="10">'
        f"{escape(_stamp(p.start + p.width * len(p.buckets)))}</text>",
    ]
    for i, counts in enumerate(p.buckets):
        y = float(h - bottom)
        for state in STATE_ORDER:
            n = counts.get(state, 0)
            if not n:
                continue
            height = n / tallest * (h - bottom - 16)
            y -= height
            out.append(
                f'<rect class="bucket" data-state="{state}" data-count="{n}" x="{left + i * bar + 1:.1f}" '
                f'y="{y:.1f}" width="{max(bar - 2, 1):.1f}" height="{height:.1f}" fill="{COLOURS[state]}">'
                f"<title>{n} {state} from {escape(_stamp(p.start + i * p.width))}</title></rect>"
            )
    out.append("</svg>")
    return "".join(out)


# --- jobs by state -------------------------------------------------------------------------------------------


def _states_bar(states: dict[str, int], total: int, width: int = 640) -> str:
    out = [f'<svg id="states" xmlns="http://www.w3.org/2000/svg" width="{width}" height="24" role="img">']
    x = 0.0
    for state in STATE_ORDER:
        n = states.get(state, 0)
        if not n:
            continue
        w = n / max(total, 1) * width
        out.append(
            f'<rect class="state" data-state="{state}" data-count="{n}" x="{x:.1f}" y="0" width="{w:.1f}" '
            f'height="24" fill="{COLOURS[state]}"><title>{n} {state}</title></rect>'
        )
        x += w
    out.append("</svg>")
    counts = "".join(
        f'<span class="count" data-state="{s}"><span class="swatch" style="background:{COLOURS[s]}"></span>'
        f"{s}: <b>{states[s]}</b></span>"
        for s in STATE_ORDER
        if states.get(s)
    )
    return "".join(out) + f'<p class="counts">{counts}</p>'


# --- the graph grouped by rule -------------------------------------------------------------------------------


@dataclass
class RuleNode:
    """The jobs of one rule: their count by state, the rules they depend on, and the node's layer (its
    topological depth: 0 for a rule that depends on no other)."""

    rule: str
    states: Counter[str] = field(default_factory=Counter)
    needs: Counter[str] = field(default_factory=Counter)
    """The rules its jobs depend on, with how many job-to-job dependencies each."""
    depth: int = 0

    @property
    def jobs(self) -> int:
        return sum(self.states.values())


def rule_graph(jobs: Sequence[Job]) -> list[RuleNode]:
    """The request's rules, in layer order then first appearance. A dependency on a job outside the request is
    left out; rules whose jobs depend on each other in a cycle share the layer after what they depend on."""
    rule_of = {j.id: _rule(j) for j in jobs}
    nodes: dict[str, RuleNode] = {}
    for j in jobs:
        node = nodes.setdefault(_rule(j), RuleNode(_rule(j)))
        node.states[_state(j)] += 1
        for dep in j.deps:
            other = rule_of.get(dep)
            if other is not None and other != node.rule:
                node.needs[other] += 1
    # Kahn's algorithm on the rules; the depth of a rule is one more than the deepest rule it needs.
    waiting = {name: len(node.needs) for name, node in nodes.items()}
    feeds: dict[str, list[str]] = defaultdict(list)
    for name, node in nodes.items():
        for need in node.needs:
            feeds[need].append(name)
    ready = [name for name, n in waiting.items() if n == 0]
    placed: set[str] = set()
    while ready:
        name = ready.pop()
        placed.add(name)
        for user in feeds[name]:
            nodes[user].depth = max(nodes[user].depth, nodes[name].depth + 1)
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    cyclic = [name for name in nodes if name not in placed]
    if cyclic:
        after = 1 + max((nodes[n].depth for n in placed), default=-1)
        for name in cyclic:
            nodes[name].depth = after
    order = {name: i for i, name in enumerate(nodes)}
    return sorted(nodes.values(), key=lambda n: (n.depth, order[n.rule]))


def _graph_svg(nodes: Sequence[RuleNode]) -> str:
    box_w, box_h, gap_x, gap_y, margin = 180, 58, 30, 50, 10
    layers: dict[int, list[RuleNode]] = defaultdict(list)
    for node in nodes:
        layers[node.depth].append(node)
    widest = max((len(layer) for layer in layers.values()), default=1)
    width = margin * 2 + widest * box_w + (widest - 1) * gap_x
    height = margin * 2 + len(layers) * box_h + max(len(layers) - 1, 0) * gap_y
    where: dict[str, tuple[float, float]] = {}
    for row, depth in enumerate(sorted(layers)):
        # Fewer crossings: a node sits under the mean position of the rules it needs (the barycenter heuristic).
        layer = sorted(layers[depth], key=lambda n: _mean([where[r][0] for r in n.needs if r in where]))
        span = len(layer) * box_w + (len(layer) - 1) * gap_x
        x0 = (width - span) / 2
        for i, node in enumerate(layer):
            where[node.rule] = (x0 + i * (box_w + gap_x), margin + row * (box_h + gap_y))
    out = [
        f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" role="img" '
        'aria-label="the request graph, grouped by rule">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#555"/></marker></defs>',
    ]
    for node in nodes:
        x, y = where[node.rule]
        for need, n in node.needs.items():
            nx, ny = where[need]
            out.append(
                f'<line class="edge" data-from="{escape(need)}" data-to="{escape(node.rule)}" '
                f'x1="{nx + box_w / 2:.1f}" y1="{ny + box_h:.1f}" x2="{x + box_w / 2:.1f}" y2="{y:.1f}" '
                f'stroke="#555" marker-end="url(#arrow)"><title>{n} dependencies</title></line>'
            )
    for node in nodes:
        x, y = where[node.rule]
        counts = ", ".join(f"{node.states[s]} {s}" for s in STATE_ORDER if node.states.get(s))
        out.append(
            f'<g class="rule" data-rule="{escape(node.rule)}" data-jobs="{node.jobs}" '
            f'transform="translate({x:.1f},{y:.1f})"><title>{escape(node.rule)}: {escape(counts)}</title>'
            f'<rect width="{box_w}" height="{box_h}" rx="6" fill="#fff" stroke="#333"/>'
            f'<text x="8" y="18" font-size="13" font-weight="bold">{escape(_short(node.rule, 22))}</text>'
            f'<text class="jobs" x="8" y="34" font-size="11">{node.jobs} job{"" if node.jobs == 1 else "s"}</text>'
        )
        bar_x = 8.0
        for state in STATE_ORDER:
            n = node.states.get(state, 0)
            if n:
                w = n / node.jobs * (box_w - 16)
                out.append(
                    f'<rect class="part" data-state="{state}" data-count="{n}" x="{bar_x:.1f}" y="{box_h - 16}" '
                    f'width="{w:.1f}" height="10" fill="{COLOURS[state]}"/>'
                )
                bar_x += w
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _mean(values: list[float]) -> float:
    """The mean, or infinity for none (a node that needs no placed rule goes after those that do)."""
    return sum(values) / len(values) if values else math.inf


def _short(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


# --- the pages -----------------------------------------------------------------------------------------------


def _job_link(job: str) -> str:
    return f"/v1/jobs/{quote(job, safe='')}/page"


def request_page(status: RequestStatus, jobs: Sequence[Job], now: float) -> str:
    """The page of one request."""
    ordered = sorted(jobs, key=lambda j: (int(j.id) if j.id.isdigit() else math.inf, j.id))
    nodes = rule_graph(ordered)
    title = f"request {status.id} {status.name}"
    eta = "finished" if status.final else f"ETA {_stamp(status.eta)}"
    body = [
        f"<h1>Request {escape(status.id)}: {escape(status.name)}</h1>",
        f'<p id="summary">owner {escape(status.owner or "-")}, group {escape(status.group or "-")}; '
        f"submitted {escape(_stamp(status.submitted))}; {status.jobs} jobs; {escape(eta)}; page made "
        f"{escape(_stamp(now))} (reload to refresh)</p>",
        "<h2>Jobs by state</h2>",
        _states_bar(status.states, status.jobs),
        "<h2>Progress: jobs ended over time</h2>",
        _progress_svg(progress(ordered, status.submitted, now)),
        f"<h2>Graph by rule ({len(nodes)} rules)</h2>",
        _graph_svg(nodes),
        "<h2>Jobs</h2>",
    ]
    shown = ordered[:LISTED]
    if len(ordered) > len(shown):
        body.append(
            f"<p>The first {len(shown)} of {len(ordered)} jobs; <code>pilotfish jobs --request "
            f"{escape(status.id)}</code> lists them all.</p>"
        )
    body.append(
        '<table id="jobs"><tr><th>job</th><th>name</th><th>rule</th><th>state</th><th>attempt</th>'
        "<th>ended</th><th></th></tr>"
    )
    for j in shown:
        link = _job_link(j.id)
        body.append(
            f'<tr class="job" data-state="{_state(j)}"><td>{escape(j.id)}</td><td>{escape(j.name)}</td>'
            f"<td>{escape(_rule(j))}</td><td>{_state(j)}</td><td>{j.attempt}</td><td>{escape(_stamp(j.ended))}</td>"
            f'<td><a href="{link}#events">events</a> <a href="{link}#logs">logs</a></td></tr>'
        )
    body.append("</table>")
    return _document(title, body)


def job_page(job: Job, events: Sequence[JobEvent], logs: LogView | None, why_no_logs: str = "") -> str:
    """The page of one job: its record's main fields, its events in order and the kept tail of its output."""
    request = f"/v1/requests/{quote(job.request, safe='')}/page" if job.request else ""
    body = [
        f"<h1>Job {escape(job.id)}: {escape(job.name)}</h1>",
        f"<p>rule {escape(_rule(job))}; state <b>{_state(job)}</b>; attempt {job.attempt}; exit code "
        f"{'-' if job.exit_code is None else job.exit_code}; ended {escape(_stamp(job.ended))}"
        + (f'; <a href="{request}">request {escape(job.request)}</a>' if request else "")
        + "</p>",
        '<h2 id="events">Events</h2>',
        '<table class="events"><tr><th>time</th><th>from</th><th>to</th><th>by</th><th>attempt</th><th>pilot</th>'
        "<th>exit</th><th>reason</th></tr>",
    ]
    for e in events:
        cells = (
            _stamp(e.time),
            e.source or "-",
            e.state,
            e.by,
            "-" if e.attempt is None else str(e.attempt),
            e.pilot or "-",
            "-" if e.exit_code is None else str(e.exit_code),
            e.reason or "",
        )
        body.append('<tr class="event">' + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    body.append("</table>")
    body.append('<h2 id="logs">Output</h2>')
    if logs is None:
        body.append(f"<p>{escape(why_no_logs or 'no output kept')}</p>")
    else:
        body.extend(f"<p>{escape(line)}</p>" for line in logs.where)
        for stream in logs.streams:
            body.append(f"<h3>{escape(stream)} (attempt {logs.attempt})</h3><pre>{escape(logs.text(stream))}</pre>")
    return _document(f"job {job.id} {job.name}", body)
