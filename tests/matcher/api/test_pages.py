"""The request page over plain HTTP (FastAPI's TestClient on the real app, a real redis-server): what it shows,
escaping, the token-to-cookie step, and who may see it (401/403)."""

from __future__ import annotations

import re
from collections.abc import Callable

from fastapi.testclient import TestClient

from matcher.api.routes.pages import COOKIE
from taskqueues.store import Store

from .conftest import bearer
from .pages_support import submit_graph

Tokens_ = Callable[[], dict[str, str]]


def test_the_page_shows_counts_chart_graph_and_job_links(http: TestClient, tokens: Tokens_, api_store: Store) -> None:
    alice = tokens()["alice"]
    made = submit_graph(http, alice, api_store)
    page = http.get(f"/v1/requests/{made['request']}/page", headers=bearer(alice))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), page.text
    assert "script-src" not in page.headers["content-security-policy"]  # default-src 'none': no script at all
    html = page.text
    # Jobs by state: the counts and the bar.
    counts = dict(re.findall(r'<span class="count" data-state="([a-z-]+)">.*?<b>(\d+)</b>', html))
    stored = {j.state.value for j in api_store.request_jobs(made["request"])}
    assert set(counts) == stored
    assert sum(int(n) for n in counts.values()) == 6
    # The graph: one node per rule, in layers, with an edge per rule-to-rule dependency.
    rules = dict(re.findall(r'<g class="rule" data-rule="([^"]+)" data-jobs="(\d+)"', html))
    assert rules == {"fetch": "3", "fit": "1", "add": "1", "(no rule)": "1"}
    edges = set(re.findall(r'<line class="edge" data-from="([^"]+)" data-to="([^"]+)"', html))
    assert edges == {("fetch", "fit"), ("fit", "add")}
    # The chart: the two ended jobs in the buckets.
    chart = re.findall(r'<rect class="bucket" data-state="([a-z-]+)" data-count="(\d+)"', html)
    assert sorted(chart) == [("dep-failed", "2"), ("done", "1"), ("failed", "1")]  # f2's failure ended fit, add
    # A link to each job's events and logs.
    for job in made["ids"].values():
        assert f'href="/v1/jobs/{job}/page#events"' in html and f'href="/v1/jobs/{job}/page#logs"' in html


def test_names_are_escaped(http: TestClient, tokens: Tokens_, api_store: Store) -> None:
    """The request's name and a failure's reason are outside text: escaped (job names cannot hold '<': see
    tests/matcher/test_page.py for a job record named so)."""
    alice = tokens()["alice"]
    made = submit_graph(http, alice, api_store)
    html = http.get(f"/v1/requests/{made['request']}/page", headers=bearer(alice)).text
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    job = http.get(f"/v1/jobs/{made['ids']['f2']}/page", headers=bearer(alice))  # its failure's reason
    assert job.status_code == 200 and "<script" not in job.text and "&lt;script&gt;" in job.text


def test_a_job_page_shows_its_events_and_output_place(http: TestClient, tokens: Tokens_, api_store: Store) -> None:
    alice = tokens()["alice"]
    made = submit_graph(http, alice, api_store)
    page = http.get(f"/v1/jobs/{made['ids']['f2']}/page", headers=bearer(alice))
    assert page.status_code == 200, page.text
    states = re.findall(r'<tr class="event"><td>[^<]*</td><td>[^<]*</td><td>([a-z-]+)</td>', page.text)
    assert states[-2:] == ["matched", "failed"] and "exit code 3" in page.text
    assert 'id="logs"' in page.text and f'href="/v1/requests/{made["request"]}/page"' in page.text


def test_a_token_once_in_the_address_becomes_a_strict_httponly_cookie(
    http: TestClient, tokens: Tokens_, api_store: Store
) -> None:
    alice = tokens()["alice"]
    made = submit_graph(http, alice, api_store)
    path = f"/v1/requests/{made['request']}/page"
    first = http.get(path, params={"token": alice})
    assert first.status_code == 200 and alice not in first.text  # never echoed
    assert f'content="0;url={path}"' in first.text and first.headers["referrer-policy"] == "no-referrer"
    cookie = first.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={alice};") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Path=/v1" in cookie and "Secure" not in cookie  # plain HTTP here; Secure over HTTPS
    page = http.get(path)  # the TestClient keeps the cookie, as a browser would
    assert page.status_code == 200 and "Graph by rule" in page.text and alice not in page.text
    # The cookie opens the pages only: the JSON routes still want the header.
    assert http.get(f"/v1/requests/{made['request']}").status_code == 401


def test_who_may_see_the_page(make_api: Callable[..., TestClient], tokens: Tokens_, api_store: Store) -> None:
    made_tokens = tokens()
    http = make_api()
    made = submit_graph(http, made_tokens["alice"], api_store)
    path, job_path = f"/v1/requests/{made['request']}/page", f"/v1/jobs/{made['ids']['f1']}/page"
    for p in (path, job_path):
        none = http.get(p)
        assert none.status_code == 401 and "?token=" in none.json()["error"], none.text
        assert http.get(p, params={"token": "pft_0123456789ab_" + "x" * 43}).status_code == 401
        assert "set-cookie" not in http.get(p, params={"token": "nope"}).headers
        http.cookies.set(COOKIE, "pft_0123456789ab_" + "x" * 43)
        assert http.get(p).status_code == 401
        http.cookies.clear()
        refused = http.get(p, headers=bearer(made_tokens["dave"]))  # admin of another group
        assert refused.status_code == 403 and "api_users_see_all" in refused.json()["error"]
        for who in ("alice", "carol", "root"):  # the owner, its group's admin, an operator
            assert http.get(p, headers=bearer(made_tokens[who])).status_code == 200, who
    assert http.get(path, headers=bearer(made_tokens["bob"])).status_code == 403
    public = make_api(api_users_see_all=True)
    assert public.get(path, headers=bearer(made_tokens["bob"])).status_code == 200
    assert http.get("/v1/requests/nosuch/page", headers=bearer(made_tokens["root"])).status_code == 404
