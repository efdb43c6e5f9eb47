"""Units, requirement validation, buckets, the canonical hash, and RFC #7's matching rules."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskqueues.errors import PilotfishError, RequirementError, ValidationError
from taskqueues.requirements import (
    CONSUMABLES,
    MAX_MEM_MB,
    Requirements,
    bucket,
    mismatch,
    parse_requirements,
)
from taskqueues.units import parse_duration_s, parse_size_mb
from tests.support.paths import ROOT

# ------------------------------------------------------------------------------------------ units


@pytest.mark.parametrize(
    ("text", "mb"),
    [
        (512, 512),
        (1.2, 2),  # fractions of a MB round up: a requirement never shrinks
        ("300", 300),
        ("512M", 512),
        ("512MB", 512),
        ("4G", 4000),
        ("4GB", 4000),
        ("4 g", 4000),
        ("1.5G", 1500),
        ("2T", 2_000_000),
        ("100K", 1),
        ("1000K", 1),
        ("1001K", 2),
        ("2000000B", 2),
        ("1P", 10**9),
        ("1Gi", 1074),  # 2**30 B = 1073.741824 MB
        ("4GiB", 4295),
        ("1Mi", 2),  # 1.048576 MB
        ("0", 0),
        (".5G", 500),
    ],
)
def test_sizes_in_decimal_megabytes(text: object, mb: int) -> None:
    assert parse_size_mb(text, field="mem", job="j") == mb


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("4Q", "unknown size unit 'Q'"),
        ("4Gx", "unknown size unit 'Gx'"),
        ("-1G", "must not be negative"),
        (-5, "must not be negative"),
        ("abc", "cannot read 'abc' as a size"),
        ("", "cannot read '' as a size"),
        ("G", "cannot read 'G'"),
        ("1e3", "cannot read '1e3'"),
        (True, "not a boolean"),
        (float("nan"), "must be finite"),
        (float("inf"), "must be finite"),
        (None, "not NoneType"),
        (["4G"], "not list"),
        ("9" * 100, "at most 64 characters"),
    ],
)
def test_bad_sizes_name_field_and_job(value: object, fragment: str) -> None:
    with pytest.raises(RequirementError) as caught:
        parse_size_mb(value, field="mem", job="job-7")
    message = str(caught.value)
    assert fragment in message
    assert "'mem'" in message and "'job-7'" in message
    assert caught.value.field == "mem" and caught.value.job == "job-7"


def test_size_maximum() -> None:
    assert parse_size_mb("64T", field="mem", maximum=MAX_MEM_MB) == MAX_MEM_MB
    with pytest.raises(RequirementError, match="over the limit of 64000000 MB"):
        parse_size_mb("65T", field="mem", job="j", maximum=MAX_MEM_MB)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90),
        (90.2, 91),
        ("300", 300),
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1d", 86400),
        ("1w", 604800),
        ("1h30m", 5400),
        ("1d 12h", 129600),
        ("1.5h", 5400),
        ("1:30:00", 5400),
        ("36:00:00", 129600),
        ("2-01:00:00", 176400),
        ("0:00:05", 5),
    ],
)
def test_durations_in_seconds(text: object, seconds: int) -> None:
    assert parse_duration_s(text, field="wall", job="j") == seconds


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("1h30", "a number without a unit must stand alone"),
        ("30:00", "'H:MM:SS'"),
        ("1:60:00", "'H:MM:SS'"),
        ("2hr", "cannot read '2hr'"),
        ("5y", "unknown duration unit 'y'"),
        ("", "empty string"),
        ("  ", "empty string"),
        ("-5s", "must not be negative"),
        (-1, "must not be negative"),
        (False, "not a boolean"),
        (float("inf"), "must be finite"),
        ({"h": 1}, "not dict"),
    ],
)
def test_bad_durations_name_field_and_job(value: object, fragment: str) -> None:
    with pytest.raises(RequirementError) as caught:
        parse_duration_s(value, field="wall", job="job-8")
    assert fragment in str(caught.value)
    assert "'wall'" in str(caught.value) and "'job-8'" in str(caught.value)


@given(st.integers(min_value=0, max_value=10**7), st.sampled_from(["", "M", "MB", "m"]))
def test_plain_megabytes_round_trip(n: int, unit: str) -> None:
    assert parse_size_mb(f"{n}{unit}", field="mem") == n


@given(st.integers(0, 1000), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_clock_and_unit_forms_agree(d: int, h: int, m: int, s: int) -> None:
    clock = parse_duration_s(f"{d}-{h:02d}:{m:02d}:{s:02d}", field="wall")
    units = parse_duration_s(f"{d}d{h}h{m}m{s}s", field="wall")
    assert clock == units == ((d * 24 + h) * 60 + m) * 60 + s


# ----------------------------------------------------------------------------------------- bucket


@pytest.mark.parametrize(("n", "b"), [(9, 10), (100, 112), (1025, 1280), (1000, 1024), (4000, 4096), (16, 16)])
def test_bucket_examples(n: int, b: int) -> None:
    assert bucket(n) == b


def test_bucket_leaves_small_values_alone() -> None:
    assert [bucket(n) for n in range(9)] == list(range(9))


def test_bucket_refuses_negative() -> None:
    with pytest.raises(RequirementError):
        bucket(-1)


@given(st.integers(min_value=0, max_value=2**64))
def test_bucket_properties(n: int) -> None:
    b = bucket(n)
    assert b >= n  # never below the input
    assert 4 * (b - n) < n or n <= 8  # less than 25 % above it (one step of the 3rd bit)
    assert bucket(b) == b  # a bucket is its own bucket
    assert bin(b).rstrip("0").count("1") <= 3 or b <= 8  # only 3 significant bits survive
    assert bucket(n + 1) >= b  # monotone


@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_bucket_monotone(a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert bucket(low) <= bucket(high)


# ---------------------------------------------------------------------------- parse and validate


def test_defaults_and_exact_values() -> None:
    req = parse_requirements({}, job="j")
    assert (req.cpu, req.mem, req.tmp, req.wall) == (1, 0, 0, None)
    req = parse_requirements({"cpu": 3, "mem": "1.5G", "tmp": "20G", "wall": "2h"}, job="j")
    assert (req.cpu, req.mem, req.tmp, req.wall) == (3, 1500, 20000, 7200)
    assert dict(req.values) == {"cpu": 3, "mem": 1500, "tmp": 20000, "wall": 7200}


def test_free_form_names_stay_exact() -> None:
    req = parse_requirements(
        {
            "Platform": "EL9",
            "CPUModel": "Intel Xeon",
            "MaxMemory": 4001,
            "MinRatio": 0.35,
            "cpu": 9,
            "mem": 1001,
        },
        job="j",
    )
    assert req.free_form() == {
        "Platform": "EL9",
        "CPUModel": "Intel Xeon",
        "MaxMemory": 4001,
        "MinRatio": 0.35,
    }
    canonical = req.canonical()
    assert canonical["MaxMemory"] == 4001 and canonical["MinRatio"] == 0.35  # not bucketed
    assert canonical["cpu"] == 10 and canonical["mem"] == 1024  # consumables bucketed
    assert req.cpu == 9 and req.mem == 1001  # the exact values stay with the job


def test_lists_become_sorted_unique_tuples() -> None:
    req = parse_requirements({"SoftwareTag": ["b", "a", "b"]}, job="j")
    assert req.values["SoftwareTag"] == ("a", "b")
    assert req.canonical()["SoftwareTag"] == ["a", "b"]


def test_integral_floats_are_ints() -> None:
    assert parse_requirements({"MaxMemory": 4000.0}).values["MaxMemory"] == 4000
    assert parse_requirements({"MaxMemory": 4000.0}).tq_id == parse_requirements({"MaxMemory": 4000}).tq_id
    assert parse_requirements({"cpu": 2.0}).cpu == 2
    assert parse_requirements({"cpu": "4"}).cpu == 4


def test_constructor_validates_like_parse() -> None:
    assert Requirements({"mem": "4G"}) == parse_requirements({"mem": 4000})
    assert hash(Requirements({"mem": "4G"})) == hash(parse_requirements({"mem": 4000}))
    with pytest.raises(RequirementError):
        Requirements({"cpu": 0})


def test_parsing_is_idempotent() -> None:
    req = parse_requirements({"mem": "1.5G", "wall": "1h", "SoftwareTag": ["x", "a"], "MaxMemory": 2.5})
    assert parse_requirements(dict(req.values)) == req


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        ({"cpu": 0}, "cpu", "between 1 and 4096"),
        ({"cpu": 4097}, "cpu", "between 1 and 4096"),
        ({"cpu": -1}, "cpu", "between 1 and 4096"),
        ({"cpu": 1.5}, "cpu", "whole number"),
        ({"cpu": "two"}, "cpu", "whole number"),
        ({"cpu": True}, "cpu", "whole number"),
        ({"cpu": float("nan")}, "cpu", "whole number"),
        ({"cpu": "9" * 5000}, "cpu", "between 1 and 4096"),  # int() of it raised ValueError
        ({"Level": 10**5000}, "Level", "<an integer of more than 4300 digits> is over the limit"),  # so did repr()
        ({"mem": "4Q"}, "mem", "unknown size unit"),
        ({"mem": -1}, "mem", "negative"),
        ({"mem": "65T"}, "mem", "over the limit"),
        ({"tmp": float("inf")}, "tmp", "finite"),
        ({"wall": "2 years"}, "wall", "unknown duration unit 'y'"),
        ({"wall": "366d"}, "wall", "over the limit"),
        ({"wall": 0}, "wall", "at least one second"),
        ({"Platform": True}, "Platform", "boolean"),
        ({"Platform": None}, "Platform", "not NoneType"),
        ({"Platform": ""}, "Platform", "empty string"),
        ({"Platform": "x" * 257}, "Platform", "at most 256"),
        ({"Platform": "EL9\n"}, "Platform", "control characters"),
        ({"Platform": {"os": "EL9"}}, "Platform", "nested mappings"),
        ({"Platform": b"EL9"}, "Platform", "not bytes"),
        ({"SoftwareTag": []}, "SoftwareTag", "empty list"),
        ({"SoftwareTag": ["a", 1]}, "SoftwareTag", "must be strings"),
        ({"SoftwareTag": ["a", ["b"]]}, "SoftwareTag", "must be strings"),
        ({"SoftwareTag": ["ok", ""]}, "SoftwareTag", "empty string"),
        ({"SoftwareTag": [f"t{i}" for i in range(65)]}, "SoftwareTag", "at most 64 values"),
        ({"Level": -3}, "Level", "negative"),
        ({"Level": float("nan")}, "Level", "finite"),
        ({"Level": float("-inf")}, "Level", "finite"),
        ({"Level": 2**60}, "Level", "2**53"),
        ({"MaxMemory": "4000"}, "MaxMemory", "needs a number"),
        ({"MinDisk": ["1"]}, "MinDisk", "needs a number"),
        ({"MaxMemory": True}, "MaxMemory", "boolean"),
        ({"BannedSite": 3}, "BannedSite", "site name"),
        ({"": "x"}, "", "must not be empty"),
        ({"Soft Tag": "x"}, "Soft Tag", "blanks or control"),
        ({"Tag\t": "x"}, "Tag\t", "blanks or control"),
        ({"Tag\x00": "x"}, "Tag\x00", "blanks or control"),
        ({"N" * 257: "x"}, "N" * 257, "at most 256"),
    ],
)
def test_every_validation_error_names_field_and_job(raw: dict[str, object], field: str, fragment: str) -> None:
    with pytest.raises(RequirementError) as caught:
        parse_requirements(raw, job="job-42")
    assert fragment in str(caught.value)
    assert caught.value.job == "job-42" and caught.value.field == field
    assert "'job-42'" in str(caught.value)
    assert isinstance(caught.value, ValidationError) and isinstance(caught.value, PilotfishError)


def test_too_many_names_and_non_mappings() -> None:
    with pytest.raises(RequirementError, match="at most 64 requirement names") as caught:
        parse_requirements({f"Tag{i}": "x" for i in range(65)}, job="big")
    assert caught.value.job == "big"
    assert len(parse_requirements({f"Tag{i}": "x" for i in range(64)}).values) == 64
    with pytest.raises(RequirementError, match="must be a mapping"):
        parse_requirements(["cpu", 1], job="j")  # type: ignore[arg-type]
    with pytest.raises(RequirementError, match="must be a string"):
        parse_requirements({3: "x"}, job="j")  # type: ignore[dict-item]


def test_max_min_prefix_needs_a_following_name() -> None:
    # "Max" alone is a plain name (the RFC's rule is about a prefix), so a string is fine there.
    assert parse_requirements({"Max": "yes", "Min": "no"}).values["Max"] == "yes"


# --------------------------------------------------------------------------- canonical form, hash


def test_canonical_form_is_order_independent() -> None:
    one = parse_requirements({"cpu": 2, "SoftwareTag": ["b", "a"], "Platform": "EL9", "mem": "4G"})
    two = parse_requirements({"mem": 4000, "Platform": "EL9", "SoftwareTag": ["a", "b", "a"], "cpu": 2})
    assert one.canonical_json() == two.canonical_json()
    assert one.tq_id == two.tq_id


def test_defaults_do_not_make_a_new_task_queue() -> None:
    assert parse_requirements({}).tq_id == parse_requirements({"cpu": 1, "mem": 0, "tmp": 0}).tq_id
    assert parse_requirements({}).tq_id != parse_requirements({"wall": 60}).tq_id


def test_bucketing_groups_close_consumables_but_not_free_form() -> None:
    assert parse_requirements({"mem": 1000}).tq_id == parse_requirements({"mem": 1001}).tq_id
    assert parse_requirements({"mem": 1024}).tq_id != parse_requirements({"mem": 1025}).tq_id
    assert parse_requirements({"MaxMemory": 1000}).tq_id != parse_requirements({"MaxMemory": 1001}).tq_id


KNOWN = {
    "cpu": 3,
    "mem": "1.5G",
    "wall": "2h",
    "Platform": "EL9",
    "SoftwareTag": ["AppVersion2", "AppVersion1"],
    "MaxMemory": 4000,
}
KNOWN_JSON = (
    '{"MaxMemory":4000,"Platform":"EL9","SoftwareTag":["AppVersion1","AppVersion2"],'
    '"cpu":3,"mem":1536,"tmp":0,"wall":8192}'
)
KNOWN_ID = "235618c40771d865"  # pinned: a change here renames every task queue in a running system


def test_known_hash_is_pinned() -> None:
    req = parse_requirements(KNOWN)
    assert req.canonical_json() == KNOWN_JSON
    assert hashlib.sha256(KNOWN_JSON.encode()).hexdigest()[:16] == KNOWN_ID
    assert req.tq_id == KNOWN_ID
    assert len(req.tq_id) == 16 and int(req.tq_id, 16) >= 0


def test_hash_is_the_same_in_another_process() -> None:
    code = (
        "import json, sys\n"
        "from taskqueues.requirements import parse_requirements\n"
        "print(parse_requirements(json.loads(sys.argv[1])).tq_id)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(KNOWN)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=ROOT,
    )
    assert done.stdout.strip() == KNOWN_ID


_names = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12).filter(
    lambda n: n not in CONSUMABLES and not n.startswith(("Max", "Min")) and n != "BannedSite"
)
_values = st.one_of(
    st.integers(0, 10**6),
    st.text(alphabet="abcXYZ019-._ ", min_size=1, max_size=10),
    st.lists(st.text(alphabet="abc", min_size=1, max_size=3), min_size=1, max_size=4),
)


@settings(max_examples=200)
@given(st.dictionaries(_names, _values, max_size=8), st.randoms())
def test_canonical_ignores_insertion_and_list_order(raw: dict[str, object], rnd: object) -> None:
    items = list(raw.items())
    rnd.shuffle(items)  # type: ignore[attr-defined]
    shuffled = {k: (list(reversed(v)) if isinstance(v, list) else v) for k, v in items}
    assert parse_requirements(raw).tq_id == parse_requirements(shuffled).tq_id
    # The canonical JSON is plain, compact and sorted.
    text = parse_requirements(raw).canonical_json()
    assert json.loads(text) == parse_requirements(raw).canonical()
    assert json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) == text


# ------------------------------------------------------------------------------ matching (RFC #7)


def test_absent_name_makes_the_resource_ineligible() -> None:
    assert mismatch({"CPUModel": "Intel Xeon"}, {"Platform": "EL9"}) == (
        "CPUModel: wants 'Intel Xeon', queue has no CPUModel"
    )


def test_plain_value_must_be_equal() -> None:
    assert mismatch({"Platform": "EL9"}, {"Platform": "EL9"}) is None
    assert mismatch({"Platform": "EL9"}, {"Platform": "EL8"}) == "Platform: wants 'EL9', queue has 'EL8'"
    assert mismatch({"Platform": "EL9"}, {"Platform": "el9"}) is not None  # case matters


def test_list_value_means_any_of() -> None:
    wants = {"SoftwareTag": ("AppVersion1", "AppVersion2")}
    assert mismatch(wants, {"SoftwareTag": "AppVersion2"}) is None
    assert mismatch(wants, {"SoftwareTag": "AppVersion3"}) == (
        "SoftwareTag: wants one of ['AppVersion1', 'AppVersion2'], queue has 'AppVersion3'"
    )


def test_list_on_the_resource_side_offers_each_value() -> None:
    offers = {"SoftwareTag": ("AppVersion1", "ROOT-6"), "Platform": ["EL8", "EL9"]}
    assert mismatch({"SoftwareTag": "ROOT-6"}, offers) is None
    assert mismatch({"Platform": "EL9"}, offers) is None
    assert mismatch({"SoftwareTag": ["X", "AppVersion1"]}, offers) is None  # lists on both sides intersect
    assert mismatch({"SoftwareTag": ["X", "Y"]}, offers) == (
        "SoftwareTag: wants one of ['X', 'Y'], queue has ['AppVersion1', 'ROOT-6']"
    )


def test_max_prefix_needs_resource_at_least_as_large() -> None:
    assert mismatch({"MaxMemory": 4000}, {"MaxMemory": 4000}) is None
    assert mismatch({"MaxMemory": 4000}, {"MaxMemory": 8000}) is None
    assert mismatch({"MaxMemory": 4000}, {"MaxMemory": 3999}) == "MaxMemory: wants >= 4000, queue has 3999"
    assert mismatch({"MaxMemory": 4000}, {}) == "MaxMemory: wants 4000, queue has no MaxMemory"


def test_min_prefix_needs_resource_at_most_as_large() -> None:
    assert mismatch({"MinDiskSpeed": 100}, {"MinDiskSpeed": 100}) is None
    assert mismatch({"MinDiskSpeed": 100}, {"MinDiskSpeed": 50}) is None
    assert mismatch({"MinDiskSpeed": 100}, {"MinDiskSpeed": 101}) == "MinDiskSpeed: wants <= 100, queue has 101"


def test_comparisons_read_resource_strings_and_lists() -> None:
    # Pilots publish through Redis: numbers arrive as strings.
    assert mismatch({"MaxMemory": 4000}, {"MaxMemory": "4096"}) is None
    assert mismatch({"MaxMemory": 4000}, {"MaxMemory": "4000.5"}) is None
    assert mismatch({"MaxMemory": 4000}, {"MaxMemory": ["2000", "8000"]}) is None
    assert mismatch({"MaxMemory": 4000}, {"MaxMemory": "lots"}) == (
        "MaxMemory: wants 4000, queue has 'lots', which is not a number"
    )
    assert mismatch({"Cores": 8}, {"Cores": "8"}) is None
    assert mismatch({"Cores": 8}, {"Cores": 8.0}) is None
    assert mismatch({"Cores": "8"}, {"Cores": "8.0"}) is not None  # two strings compare as text


def test_banned_site() -> None:
    wants = {"BannedSite": ("LCG.CERN.ch", "LCG.RAL.uk")}
    assert mismatch(wants, {"Site": "LCG.CERN.ch"}) == "BannedSite: bans 'LCG.CERN.ch', queue has Site 'LCG.CERN.ch'"
    assert mismatch(wants, {"Site": "local"}) is None
    assert mismatch(wants, {}) is None  # BannedSite needs nothing on the resource
    assert mismatch({"BannedSite": "local"}, {"Site": "local"}) is not None


def test_consumables_are_not_checked_by_mismatch() -> None:
    req = parse_requirements({"cpu": 64, "mem": "1T", "Platform": "EL9"})
    assert mismatch(req, {"Platform": "EL9"}) is None
    assert mismatch(req, {"Platform": "EL9"}, noun="pilot") is None
    assert mismatch(req, {"Platform": "EL8"}, noun="pilot") == "Platform: wants 'EL9', pilot has 'EL8'"


def test_first_failure_in_sorted_name_order_is_reported() -> None:
    req = parse_requirements({"Zone": "a", "Arch": "x86"})
    assert mismatch(req, {}) == "Arch: wants 'x86', queue has no Arch"


@given(
    st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4),
    st.lists(st.sampled_from("abcdef"), min_size=1),
)
def test_any_of_is_intersection(wanted: list[str], offered: list[str]) -> None:
    eligible = mismatch({"Tag": tuple(wanted)}, {"Tag": tuple(offered)}) is None
    assert eligible == bool(set(wanted) & set(offered))


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_max_and_min_are_mirror_images(job: int, resource: int) -> None:
    assert (mismatch({"MaxX": job}, {"MaxX": resource}) is None) == (resource >= job)
    assert (mismatch({"MinX": job}, {"MinX": resource}) is None) == (resource <= job)


def test_free_form_numbers_keep_their_value() -> None:
    ratio = parse_requirements({"MinRatio": 1e-3}).values["MinRatio"]
    assert isinstance(ratio, float) and math.isclose(ratio, 1e-3)
    assert parse_requirements({"Level": 2**53}).values["Level"] == 2**53
