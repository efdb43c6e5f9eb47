"""The request page's renderer (matcher.page) on job records: escaping of a job named like a script (the
submission refuses such names; the page must not rely on it), the rule graph's layers, cycles and outside
dependencies, and the progress buckets."""

from __future__ import annotations

import re

from matcher.page import NO_RULE, progress, request_page, rule_graph
from matcher.status import RequestStatus
from taskqueues.store import Job, JobState

T0 = 1_800_000_000.0


def _job(
    i: int, rule: str, state: str = "waiting", deps: tuple[str, ...] = (), ended: float | None = None, name: str = ""
) -> Job:
    return Job(
        id=str(i), state=JobState(state), attempt=1, tq_id="tq", command="true", requirements={}, score=0.0,
        ete=1.0, submitted=T0, name=name or f"j{i}", request="1", rule=rule, deps=deps, ended=ended,
    )  # fmt: skip


def _status(jobs: list[Job]) -> RequestStatus:
    states: dict[str, int] = {}
    for j in jobs:
        states[j.state.value] = states.get(j.state.value, 0) + 1
    return RequestStatus("1", "r", 0.0, T0, T0 + 60, 0.0, len(jobs), states)


def test_a_job_named_like_a_script_is_escaped_everywhere() -> None:
    bad = "<script>alert(1)</script>"
    jobs = [_job(1, bad, name=bad), _job(2, '"><img src=x>', deps=("1",))]
    html = request_page(_status(jobs), jobs, T0 + 10)
    assert "<script" not in html and "<img" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3  # its name, its rule in the table and graph
    assert 'data-rule="&quot;&gt;&lt;img src=x&gt;"' in html


def test_rules_are_laid_out_by_depth_and_cycles_share_a_layer() -> None:
    jobs = [
        _job(1, "a"),
        _job(2, "b", deps=("1",)),
        _job(3, "c", deps=("2", "4")),
        _job(4, "d", deps=("3",)),  # c and d need each other
        _job(5, "", deps=("99",)),  # 99 is not in the request
    ]
    nodes = {n.rule: n for n in rule_graph(jobs)}
    assert {r: n.depth for r, n in nodes.items()} == {"a": 0, NO_RULE: 0, "b": 1, "c": 2, "d": 2}
    assert dict(nodes["c"].needs) == {"b": 1, "d": 1} and not nodes[NO_RULE].needs
    html = request_page(_status(jobs), jobs, T0)
    ys = dict(re.findall(r'data-rule="([^"]+)" data-jobs="\d+" transform="translate\([\d.]+,([\d.]+)\)"', html))
    assert ys["a"] == ys[NO_RULE] < ys["b"] < ys["c"] == ys["d"]


def test_progress_buckets_count_the_ended_jobs_by_state() -> None:
    jobs = [_job(1, "a", "done", ended=T0 + 1), _job(2, "a", "failed", ended=T0 + 99), _job(3, "a", "running")]
    p = progress(jobs, T0, now=T0 + 100, buckets=10)
    assert p.ended == 2 and p.buckets[0]["done"] == 1 and p.buckets[9]["failed"] == 1
    assert p.start == T0 and p.width == 10.0


def test_a_layer_is_ordered_under_what_it_needs() -> None:
    """Two chains a -> y and b -> x: x sits under b and y under a, whatever order they come in."""
    jobs = [_job(1, "a"), _job(2, "b"), _job(3, "x", deps=("2",)), _job(4, "y", deps=("1",))]
    html = request_page(_status(jobs), jobs, T0)
    xs = {
        r: float(x) for r, x in re.findall(r'data-rule="([^"]+)" data-jobs="\d+" transform="translate\(([\d.]+),', html)
    }
    assert xs["a"] < xs["b"] and xs["y"] < xs["x"] and xs["y"] == xs["a"]
