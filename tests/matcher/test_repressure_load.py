"""Re-pressure's load step against a real redis-server: a request's ETA follows what was learnt about the
work it counted as load (matcher.repressure_load)."""

from __future__ import annotations

import pytest

from matcher.repressure import repressure
from matcher.submission import Submitter
from taskqueues.catalog import Catalog
from taskqueues.store import Store
from tests.matcher.test_repressure import CATALOG, NOW, learn, spec
from tests.support.clock import FakeClock

pytestmark = pytest.mark.store(lease_seconds=600)

CORES = 2.0


@pytest.fixture
def two(store: Store, clock: FakeClock) -> Submitter:
    """A submitter whose ETAs count the load on two cores."""
    return Submitter(store, Catalog.loads(CATALOG), clock=clock, capacity=lambda: CORES)


def test_a_later_requests_eta_follows_what_an_earlier_requests_jobs_taught(two: Submitter, store: Store) -> None:
    # C first (50 s), then A: four jobs of rule "sim" hinted 300 s (3x too long), then B (one 10 s job) and
    # D (one 500 s job). Each counts the work sent before it and its own as load, on two cores.
    c = two.submit([spec("c", 50, mem=300)], name="C")
    a = two.submit([spec(f"a{i}", 300, rule="sim") for i in range(4)], name="A")
    b = two.submit([spec("b", 10, mem=200)], name="B")
    d = two.submit([spec("d", 500, mem=400)], name="D")
    assert (c.eta, a.eta, b.eta, d.eta) == (NOW + 50, NOW + 625, NOW + 630, NOW + 880)
    assert store.request(b.request)["load"] == NOW + 630 and store.request(b.request)["cores"] == CORES
    assert store.job(b.ids["b"]).score == NOW + 620

    learn(two, store, "sim", 100)  # "sim" takes 100 s: A's work is 800 core-s less than counted
    report = repressure(store, capacity=lambda: CORES)

    # C never counted A's work; A, B and D did: their loads come 400 s earlier. A and B were held by their
    # load (ETA = the new load); D's own job needs 500 s from now, later than its new load (480).
    etas = {q: store.request(q)["eta"] for q in (c.request, a.request, b.request, d.request)}
    assert etas == {c.request: NOW + 50, a.request: NOW + 225, b.request: NOW + 230, d.request: NOW + 500}
    assert report.reestimated == 4
    assert report.etas == {a.request: NOW + 225, b.request: NOW + 230, d.request: NOW + 500}
    # (the training request, sent last, counted A's work too: its load moves, but it has nothing left to run)
    loads = {q: report.loads[q] for q in (a.request, b.request, d.request)}
    assert loads == {a.request: NOW + 225, b.request: NOW + 230, d.request: NOW + 480}
    assert c.request not in report.loads and store.request(b.request)["load"] == NOW + 230
    # B's waiting job is re-scored from what A's jobs taught, though its own estimate did not move.
    assert store.job(b.ids["b"]).score == NOW + 220
    assert store.job(d.ids["d"]).score == NOW
    assert store.job(c.ids["c"]).score == NOW


def test_a_requests_eta_never_drops_below_its_load_when_its_shape_shrinks(two: Submitter, store: Store) -> None:
    # A bag of 400 s of other work first, then S: a chain of two "sim" jobs hinted 300 s beside a 10 s job.
    two.submit([spec(f"w{i}", 200, mem=300) for i in range(4)], name="W")
    s = two.submit([spec("s1", 300, rule="sim"), spec("s2", 300, rule="sim", deps=("s1",))], name="S")
    assert s.eta == NOW + 700  # load (800 + 600) / 2 over a critical path of 600
    learn(two, store, "sim", 100)
    report = repressure(store, capacity=lambda: CORES)
    # Its path now takes 200 s, but the 800 core-s sent before it are still ahead: its load, 500 s.
    assert store.request(s.request)["eta"] == NOW + 500 and store.job(s.ids["s1"]).score == NOW + 300
    assert report.etas == {s.request: NOW + 500} and report.loads[s.request] == NOW + 500


def test_a_shrunk_shape_does_not_pull_an_eta_below_a_load_that_did_not_move(store: Store, clock: FakeClock) -> None:
    # 1,000 cores: W's 600,000 core-s ahead of S make S's load 600.6 s, just over its chain's 600 s. When
    # "sim" turns out to take 100 s, S's path needs 200 s but its load moves by only 0.4 s (not counted):
    # the ETA stays the load's. (It used to be re-stored at the shape's 200 s: the load step, finding the
    # load's ETA unchanged against the stored one, left the shape's lower value in place.)
    wide = Submitter(store, Catalog.loads(CATALOG), clock=clock, capacity=lambda: 1000.0)
    wide.submit([spec(f"w{i}", 60_000, mem=300) for i in range(10)], name="W")
    s = wide.submit([spec("s1", 300, rule="sim"), spec("s2", 300, rule="sim", deps=("s1",))], name="S")
    assert s.eta == NOW + 600.6
    learn(wide, store, "sim", 100)
    report = repressure(store, capacity=lambda: 1000.0)
    assert s.request not in report.etas and s.request not in report.loads
    assert store.request(s.request)["eta"] == NOW + 600.6
    assert store.job(s.ids["s1"]).score == NOW + 600.6 - 200
