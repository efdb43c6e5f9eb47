"""Workflow files: parsing, rules, foreach, computed requirements, every bad input, and the examples.

The examples are run for real: every job's command goes to ``sh -c`` in dependency order, with
``$PILOTFISH_OUTPUTS`` and ``$TMPDIR`` set as the pilot sets them, and the values they report feed the
deferred requirements and commands of their dependents.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from matcher.workflow import (
    OUTPUTS_ENV,
    JobTemplate,
    Workflow,
    WorkflowError,
    evaluate_deferred,
    is_duration,
    is_numeric,
    load_workflow,
    parse_outputs,
    parse_workflow,
    render_command,
)
from matcher.workflow.expr import ExprError
from taskqueues.catalog import Catalog
from taskqueues.errors import ValidationError
from taskqueues.requirements import parse_requirements
from tests.support.paths import ROOT

EXAMPLES = ROOT / "examples"

BRIEF_EXAMPLE = """
name = "montage-small"
priority = 0
[params]
n = 4
[rules.project]
command = "mProject {input} {output}"
requirements = { cpu = 1, mem = "max(512M, 2 * size)" }
[[jobs]]
name = "p1"
rule = "project"
params = { input = "a.fits", output = "p1.fits", size = "300M" }
key = "project:a.fits"
[[jobs]]
name = "merge"
command = "echo merge"
deps = ["p1"]
requirements = { cpu = 2, mem = "2 * deps.p1.out_mb" }
"""


def wf(**data: Any) -> Workflow:
    return parse_workflow({"name": "t", **data}, "test.toml")


def problems(**data: Any) -> list[str]:
    """The problems of a refused workflow, checking its one-line message lists them after the file's name."""
    with pytest.raises(WorkflowError) as info:
        parse_workflow({"name": "t", **data}, "test.toml")
    assert isinstance(info.value, ValidationError)
    message = str(info.value)
    assert message.startswith("test.toml: ") and len(message.splitlines()) == 1
    for problem in info.value.problems[: WorkflowError.LISTED]:
        assert problem in message
    return info.value.problems


def job(name: str, command: str = "true", **fields: Any) -> dict[str, Any]:
    return {"name": name, "command": command, **fields}


# ---------------------------------------------------------------------------------------- parsing


def test_the_brief_example() -> None:
    workflow = parse_workflow(tomllib.loads(BRIEF_EXAMPLE), "brief.toml")
    assert workflow.name == "montage-small"
    assert workflow.order == ["p1", "merge"]
    p1, merge = workflow.jobs
    assert p1.command == "mProject a.fits p1.fits"
    assert p1.requirements == {"cpu": 1, "mem": 600}
    assert p1.rule == "project"
    assert p1.key == "project:a.fits"
    assert p1.deferred == {}
    assert merge.deps == ("p1",)
    assert merge.requirements == {"cpu": 2}
    assert merge.deferred == {"mem": "2 * deps.p1.out_mb"}
    assert merge.needs_outputs == {("p1", "out_mb")}
    assert p1.raw_requirements == {"cpu": 1, "mem": "max(512M, 2 * size)"}
    assert evaluate_deferred(merge, {"p1": {"out_mb": "21"}}) == {"cpu": 2, "mem": 42}


def test_json_gives_the_same_workflow(tmp_path: Path) -> None:
    toml_file = tmp_path / "w.toml"
    json_file = tmp_path / "w.json"
    toml_file.write_text(BRIEF_EXAMPLE)
    json_file.write_text(json.dumps(tomllib.loads(BRIEF_EXAMPLE)))
    from_toml, from_json = load_workflow(toml_file), load_workflow(json_file)
    assert from_toml.jobs == from_json.jobs
    assert from_toml.order == from_json.order
    assert from_json.source == str(json_file)


def test_job_overrides_rule_and_params_layer() -> None:
    workflow = wf(
        params={"size": "1G", "who": "request"},
        rules={"r": {"command": "run {who} {size}", "requirements": {"cpu": 1, "mem": "size"}, "ete": "1m"}},
        jobs=[
            {"name": "a", "rule": "r"},
            {"name": "b", "rule": "r", "params": {"who": "job {job}"}, "requirements": {"cpu": 4}, "ete": 5},
            {"name": "c", "rule": "r", "command": "other {job}"},
        ],
    )
    a, b, c = workflow.jobs
    assert (a.command, a.requirements, a.ete_hint) == ("run request 1G", {"cpu": 1, "mem": 1000}, 60.0)
    assert (b.command, b.requirements, b.ete_hint) == ("run job b 1G", {"cpu": 4, "mem": 1000}, 5.0)
    assert c.command == "other c"
    assert workflow.rules["r"].command == "run {who} {size}"


def test_job_params_are_templates_over_request_params_only() -> None:
    workflow = wf(params={"base": "/data"}, jobs=[job("a", "cat {path}", params={"path": "{base}/x.txt"})])
    assert workflow.jobs[0].command == "cat /data/x.txt"
    assert workflow.jobs[0].params["path"] == "/data/x.txt"


def test_plain_values_pass_through_and_free_form_strings_are_templates() -> None:
    (only,) = wf(
        params={"site": "LCG.RAL.uk", "tag": "ROOT-6.30"},
        jobs=[
            job(
                "a",
                requirements={
                    "cpu": 2,
                    "mem": "4G",
                    "tmp": " 10 GB ",
                    "wall": "1:30:00",
                    "Site": "{site}",
                    "SoftwareTag": ["{tag}", "AppVersion1"],
                    "Platform": "EL9",
                    "MaxMemory": 4000,
                    "Exclusive": True,
                },
            )
        ],
    ).jobs
    assert only.requirements == {
        "cpu": 2,
        "mem": "4G",
        "tmp": " 10 GB ",
        "wall": "1:30:00",
        "Site": "LCG.RAL.uk",
        "SoftwareTag": ["ROOT-6.30", "AppVersion1"],
        "Platform": "EL9",
        "MaxMemory": 4000,
        "Exclusive": True,
    }
    assert only.ete_hint is None  # "1:30:00" is for the requirement check to read, not a hint


def test_numeric_names_and_durations() -> None:
    assert all(is_numeric(n) for n in ("cpu", "mem", "tmp", "wall", "gpu", "ete", "MaxMemory", "MinCores"))
    assert not any(is_numeric(n) for n in ("Site", "Platform", "Maximal", "Min", "SoftwareTag"))
    assert all(is_duration(n) for n in ("wall", "ete", "MaxCPUTime", "CPUTime"))
    assert not any(is_duration(n) for n in ("mem", "MaxMemory", "cpu"))
    (only,) = wf(
        params={"hours": 2},
        jobs=[job("a", requirements={"MaxCPUTime": "hours * 1h", "MaxMemory": "2 * 1G", "wall": "30m"})],
    ).jobs
    assert only.requirements == {"MaxCPUTime": 7200, "MaxMemory": 2000, "wall": "30m"}
    assert only.ete_hint == 1800.0  # no ete: the wall requirement is the hint


def test_ete_hint_forms() -> None:
    jobs = wf(
        params={"n": 3},
        jobs=[
            job("a", ete="n * 10s"),
            job("b", ete=12),
            job("c", requirements={"wall": "2 * 1h"}),
            job("d"),
        ],
    ).jobs
    assert [j.ete_hint for j in jobs] == [30.0, 12.0, 7200.0, None]


def test_retry_on_exit_codes() -> None:
    (a, b) = wf(jobs=[job("a", retry={"on_exit": [137, 3, 3], "max": 2}), job("b")]).jobs
    assert (a.retry_on, a.retry_max) == ((3, 137), 2) and (b.retry_on, b.retry_max) == ((), 0)
    found = problems(
        jobs=[
            job("a", retry={"on_exit": [3]}),
            job("b", retry={"on_exit": [], "max": 1}),
            job("c", retry={"on_exit": [256], "max": 1}),
            job("d", retry={"on_exit": [3], "max": 0}),
        ]
    )
    assert len(found) == 4 and all("retry" in p for p in found)
    assert "must be a table {on_exit = [codes], max = N}" in found[0] and "within 1..100" in found[3]


def test_priority_and_description() -> None:
    workflow = wf(priority=-30, description="hi", jobs=[job("a")])
    assert workflow.priority == -30.0
    assert workflow.description == "hi"


# ---------------------------------------------------------------------------------------- foreach


def test_foreach_range_list_and_product() -> None:
    workflow = wf(
        params={"n": 3},
        jobs=[
            job("p{i}", "proc {i}", foreach={"i": "range(0, n)"}),
            job("x{a}{b}", "pair {a} {b}", foreach={"a": ["u", "v"], "b": "range(1, 7, 3)"}),
        ],
    )
    assert [j.name for j in workflow.jobs] == ["p0", "p1", "p2", "xu1", "xu4", "xv1", "xv4"]
    assert workflow.job("xv4").command == "pair v 4"
    assert workflow.job("p2").params["i"] == 2


def test_foreach_rows_and_templated_deps_and_keys() -> None:
    workflow = wf(
        jobs=[
            job("src{i}", foreach={"i": "range(2)"}, key="k:{i}"),
            job("d{a}{b}", deps=["src{a}", "src{b}"], foreach=[{"a": 0, "b": 1}, {"a": 1, "b": 0}]),
        ]
    )
    assert workflow.job("d01").deps == ("src0", "src1")
    assert workflow.job("d10").deps == ("src1", "src0")
    assert workflow.job("src1").key == "k:1"


def test_dependency_patterns() -> None:
    workflow = wf(
        jobs=[
            job("proj_{i}", foreach={"i": "range(3)"}),
            job("proj_all", deps=["proj_?"]),
            job("final", deps=["proj_*", "proj_1"]),
        ]
    )
    assert workflow.job("proj_all").deps == ("proj_0", "proj_1", "proj_2")
    assert workflow.job("final").deps == ("proj_0", "proj_1", "proj_2", "proj_all")  # no duplicates
    assert workflow.order[-1] == "final"


# ------------------------------------------------------------------------------- deferred and failed


def test_deferred_command_and_requirements() -> None:
    workflow = wf(
        params={"k": 2},
        jobs=[
            job("a"),
            job("b", "use {deps.a.path!q} x{k}", deps=["a"], requirements={"mem": "k * deps.a.mb", "cpu": 1}),
        ],
    )
    b = workflow.job("b")
    assert b.command_deferred
    assert b.deferred == {"mem": "k * deps.a.mb"}
    assert b.needs_outputs == {("a", "path"), ("a", "mb")}
    outputs = {"a": {"path": "my file", "mb": "300"}}
    assert render_command(b, outputs) == "use 'my file' x2"
    assert evaluate_deferred(b, outputs) == {"cpu": 1, "mem": 600}
    assert render_command(workflow.job("a"), {}) == "true"


def test_release_time_failures_name_job_and_field() -> None:
    b = wf(jobs=[job("a"), job("b", "x {deps.a.v}", deps=["a"], requirements={"mem": "1 / deps.a.n"})]).job("b")
    with pytest.raises(ExprError) as info:
        evaluate_deferred(b, {"a": {"n": "0"}})
    assert str(info.value).startswith("job 'b', field 'mem': division by zero")
    with pytest.raises(ExprError, match="did not report 'n'"):
        evaluate_deferred(b, {"a": {}})
    with pytest.raises(ExprError) as info:
        render_command(b, {"a": {}})
    assert (info.value.job, info.value.field) == ("b", "command")


def test_an_evaluation_failure_refuses_the_request_naming_job_and_field() -> None:
    # Issue 32 part 8: a load-time evaluation that fails or overflows is a refusal, not a job stored failed.
    found = problems(
        params={"input": "a.fits"},
        jobs=[
            job("q{i}", foreach={"i": "range(4)"}, requirements={"mem": "100 / (i - 2)"}),
            job("bad", requirements={"mem": "2 * input", "cpu": 1}, ete="1 / 0"),
            job("huge", requirements={"mem": "9**9**9"}),
            job("over", requirements={"tmp": "10 ** 19"}),
        ],
    )
    assert found == [
        "job 'q2', field 'mem': division by zero in '100 / (i - 2)' at column 4",
        "job 'bad', field 'mem': parameter 'input' is not a number ('a.fits': not a number with an optional unit)"
        " in '2 * input' at column 4",
        "job 'bad', field 'ete': division by zero in '1 / 0' at column 2",
        "job 'huge', field 'mem': exponent 387420489 too large (limit ±64) in '9**9**9' at column 1",
        "job 'over', field 'tmp': value out of range (limit ±1e+18) in '10 ** 19' at column 3",
    ]


@pytest.mark.parametrize(
    ("requirements", "fragment"),
    [
        ({"cpu": "\u0664"}, "field 'cpu': the digit '\u0664' is not one of 0-9"),
        ({"wall": "\u0661\u0660m"}, "field 'wall': the digit '\u0661' is not one of 0-9"),
        ({"mem": "2 * \u0664G"}, "field 'mem': the digit '\u0664' is not one of 0-9"),
        ({"mem": "--1"}, "field 'mem': malformed sign: '-' followed by '-'"),
        ({"tmp": "+-1G"}, "field 'tmp': malformed sign: '+' followed by '-'"),
        ({"MaxMemory": "- -4000"}, "field 'MaxMemory': malformed sign: '-' followed by '-'"),
    ],
)
def test_foreign_digits_and_doubled_signs_are_refused(requirements: dict[str, object], fragment: str) -> None:
    (found,) = problems(jobs=[job("a", requirements=requirements)])
    assert found.startswith(f"job 'a', {fragment}"), found


def test_a_json_key_given_twice_is_refused_naming_job_and_key(tmp_path: Path) -> None:
    path = tmp_path / "twice.json"
    path.write_text(
        '{"name": "w", "name": "w2", "rules": {"r": {"command": "a", "command": "b"}}, "jobs": ['
        '{"name": "a", "command": "echo 1", "command": "echo 2", "requirements": {"mem": 1, "mem": 2}},'
        '{"command": "x", "command": "y"}]}'
    )
    with pytest.raises(WorkflowError) as info:
        load_workflow(path)
    twice = "the key is given twice in one JSON object; give it once"
    assert info.value.problems == [
        f"field 'name': {twice}",
        f"rule 'r', field 'command': {twice}",
        f"job 'a', field 'command': {twice}",
        f"job 'a', field 'mem': {twice}",
        f"jobs entry #2, field 'command': {twice}",
    ]
    assert str(info.value).startswith(f"{path}: field 'name': ") and len(str(info.value).splitlines()) == 1
    path.write_text('{"name": "w", "jobs": [{"name": "a", "command": "true", "requirements": {"mem": 1}}]}')
    assert load_workflow(path).name == "w"  # nested objects with distinct keys stay readable


# ---------------------------------------------------------------------------------------- bad input


def test_all_problems_are_collected_each_naming_its_job() -> None:
    found = problems(
        params={"n": 2},
        rules={"r": {"command": "x"}},
        jobs=[
            job("a", deps=["c"]),
            job("b", deps=["a", "ghost"]),
            job("c", deps=["b"]),
            job("x"),
            job("x"),
            {"name": "d", "rule": "nope"},
            job("e", "run {missing}"),
            job("f", requirements={"mem": "2 * (n"}),
            job("g", requirements={"mem": "2 * deps.a.mb"}),
            job("h", requirements={"Site": "{deps.a.site}"}, deps=["a"]),
        ],
    )
    expected = [
        "job 'd', field 'rule': unknown rule 'nope' (rules: r)",
        "job 'd', field 'command': no command: give 'command' or a 'rule' that has one",
        "job 'e', field 'command': missing param 'missing'",
        "job 'f', field 'mem': expected ')', found the end in '2 * (n' at column 6",
        "job 'g', field 'mem': reads deps.a.mb but 'a' is not one of its deps in '2 * deps.a.mb'",
        "job 'h', field 'Site': only commands and numeric requirements may read dependency outputs",
        "job 'x', field 'name': more than one job has this name",
        "job 'b', field 'deps': depends on unknown job 'ghost'",
    ]
    for problem in expected:
        assert problem in found
    cycles = [p for p in found if ", field 'deps': cycle: " in p]
    assert len(cycles) == 1
    assert set(cycles[0].split(": cycle: ")[1].split(" -> ")) == {"a", "b", "c"}
    assert len(found) == len(expected) + 1


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"jobs": []}, "the request has no jobs"),
        ({}, "the request has no jobs"),
        ({"jobs": {"a": 1}}, "field 'jobs': must be an array of tables"),
        ({"jobs": ["x"]}, "jobs entry #1: must be a table, not str"),
        ({"jobs": [{"command": "x"}]}, "jobs entry #1, field 'name': must be a string"),
        ({"name": "", "jobs": [job("a")]}, "field 'name': must not be blank"),
        ({"priority": "soon", "jobs": [job("a")]}, "field 'priority': must be a number of seconds"),
        ({"priority": float("nan"), "jobs": [job("a")]}, "field 'priority': must be a number of seconds"),
        ({"colour": 1, "jobs": [job("a")]}, "field 'colour': unknown top-level field"),
        ({"jobs": [job("a", dep=["b"])]}, "job 'a', field 'dep': unknown field"),
        ({"rules": {"r": {"cmd": "x"}}, "jobs": [job("a")]}, "rule 'r', field 'cmd': unknown field"),
        ({"rules": {"r": "x"}, "jobs": [job("a")]}, "rule 'r': must be a table"),
        ({"rules": {"r": {"command": 3}}, "jobs": [job("a")]}, "rule 'r', field 'command': must be a string"),
        ({"params": {"job": 1}, "jobs": [job("a")]}, "field 'params': parameter name 'job' is reserved"),
        ({"params": {"a-b": 1}, "jobs": [job("a")]}, "parameter name 'a-b' must be an identifier"),
        ({"params": {"x": [1]}, "jobs": [job("a")]}, "parameter 'x' must be a string, a number or a boolean"),
        ({"params": [1], "jobs": [job("a")]}, "field 'params': must be a table"),
        ({"jobs": [job("a b")]}, "job 'a b', field 'name': a job name is 1 to 200 letters"),
        ({"jobs": [job("a.b")]}, "job 'a.b', field 'name': a job name is 1 to 200 letters"),
        ({"jobs": [job("a", deps="b*")]}, "job 'a', field 'deps': pattern 'b*' matches no job"),
        ({"jobs": [job("a", deps=[1])]}, "job 'a', field 'deps': must be a list of job names"),
        ({"jobs": [job("a", key=3)]}, "job 'a', field 'key': must be a string"),
        ({"jobs": [job("a", params=[1])]}, "job 'a', field 'params': must be a table"),
        ({"jobs": [job("a", requirements=[1])]}, "job 'a', field 'requirements': must be a table"),
        ({"jobs": [job("a", "")]}, "job 'a', field 'command': no command"),
        ({"jobs": [job("a", "x {a.b}")]}, "job 'a', field 'command': placeholder {a.b}: attribute and index access"),
        ({"jobs": [job("a", "x {deps.z.v}")]}, "field 'command': reads deps.z.v but 'z' is not one of its deps"),
        ({"jobs": [job("{x}")]}, "job '{x}', field 'name': unknown placeholder {x}"),
        ({"jobs": [job("a", foreach={"i": [1, 2]})]}, "job 'a', field 'foreach': the job's name must use a foreach"),
        ({"jobs": [job("a{i}", foreach={"i": []})]}, "field 'foreach': variable 'i': must be a non-empty list"),
        ({"jobs": [job("a{i}", foreach={"i": "range(0, 0)"})]}, "range(0, 0) is empty"),
        ({"jobs": [job("a{i}", foreach={"i": "range(0, 1.5)"})]}, "range() bounds must be whole numbers"),
        ({"jobs": [job("a{i}", foreach={"i": "range(0, 5, 0)"})]}, "non-zero step"),
        ({"jobs": [job("a{i}", foreach={"i": "range(0, nn)"})]}, "unknown name 'nn'"),
        ({"jobs": [job("a{i}", foreach={"i": "list(1)"})]}, "must be a list or 'range(start, stop[, step])'"),
        ({"jobs": [job("a{i}", foreach={"i": "range(0, 200000)"})]}, "over the limit of 100000"),
        ({"jobs": [job("a{i}{j}", foreach={"i": "range(1000)", "j": "range(1000)"})]}, "over the limit"),
        ({"jobs": [job("a{i}", foreach={"job": [1]})]}, "must be an identifier and not 'job' or 'deps'"),
        ({"jobs": [job("a{i}", foreach=[{"i": 1}, {"j": 2}])]}, "must bind the same variables"),
        ({"jobs": [job("a{i}", foreach=[])]}, "a foreach array must be a non-empty list of tables"),
        ({"jobs": [job("a{i}", foreach={})]}, "non-empty table of lists or an array of tables"),
        ({"jobs": [job("a", ete=-1)]}, "job 'a', field 'ete': must be a number of seconds within 0..3.1536e+07"),
        ({"jobs": [job("a", ete=[1])]}, "job 'a', field 'ete': must be seconds or a duration expression"),
        ({"jobs": [job("a", ete="x +")]}, "job 'a', field 'ete': expected a number"),
        ({"jobs": [job("a", ete="later")]}, "job 'a', field 'ete': missing param 'later'"),
        ({"jobs": [job("a"), job("b", deps=["a"], ete="deps.a.t")]}, "cannot read dependency outputs"),
        ({"jobs": [job("a", requirements={"mem": "__import__('os')"})]}, "field 'mem': string literals are not"),
        ({"jobs": [job("a", requirements={"mem": "x.y"})]}, "attribute and index access are not allowed"),
        ({"jobs": [job("a", requirements={"Site": "{nope}"})]}, "job 'a', field 'Site': missing param 'nope'"),
        ({"jobs": [job("a", requirements={"Site": "{"})]}, "job 'a', field 'Site': bad braces"),
    ],
)
def test_bad_input(data: dict[str, Any], fragment: str) -> None:
    found = problems(**data)
    assert any(fragment in problem for problem in found), found


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(WorkflowError, match="cannot read the file"):
        load_workflow(tmp_path / "missing.toml")
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text('name = "x"\njobs = [ = ]\n')
    with pytest.raises(WorkflowError, match=r"(?s)bad\.toml.*TOML syntax.*at line 2"):
        load_workflow(bad_toml)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"name": "x",\n "jobs": [}')
    with pytest.raises(WorkflowError, match=r"JSON syntax: .* at line 2"):
        load_workflow(bad_json)
    top_list = tmp_path / "list.json"
    top_list.write_text("[]")
    with pytest.raises(WorkflowError, match="the top level must be a table"):
        load_workflow(top_list)
    yaml = tmp_path / "w.yaml"
    yaml.write_text("name: x")
    with pytest.raises(WorkflowError, match=r"unknown file type '\.yaml'"):
        load_workflow(yaml)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(WorkflowError, match="not UTF-8"):
        load_workflow(binary)


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        (
            "long.json",
            '{"name": "w", "jobs": [], "priority": 1' + "0" * 5000 + "}",
            "JSON syntax: a number is too long",
        ),
        ("deep.json", '{"name": "w", "jobs": ' + "[" * 99_999 + "]" * 99_999 + "}", "JSON syntax: arrays or tables"),
        ("deep.toml", 'name = "w"\njobs = ' + "[" * 99_999 + "]" * 99_999 + "\n", "TOML syntax: arrays or tables"),
    ],
    ids=["long-int", "deep-json", "deep-toml"],
)
def test_values_no_python_object_can_hold_are_refused_by_the_loader(
    tmp_path: Path, name: str, text: str, fragment: str
) -> None:
    # An integer of 5000 digits (over Python's limit for int() of text) raised ValueError, and arrays
    # nested past the recursion limit RecursionError, out of load_workflow.
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(WorkflowError) as info:
        load_workflow(path)
    assert str(info.value).startswith(f"{path}: {fragment}")


def test_a_small_file_that_expands_past_the_text_limit_is_refused_while_it_expands() -> None:
    # 2000 jobs of a 61 KB command are 122 MB of text: the expansion stops at the job that crosses 64 MiB.
    found = problems(params={"big": "x" * 61_000}, jobs=[job("p_{i}", "echo {big}", foreach={"i": "range(2000)"})])
    assert len(found) == 1
    last = int(found[0].split("'")[1].removeprefix("p_"))
    assert 1000 < last < 1200
    assert "MiB of text (commands, names, keys, parameters) by this job: split it" in found[0]


def test_patterns_are_resolved_by_their_literal_head_and_bounded() -> None:
    fan = wf(
        jobs=[
            job("part_{i}_{j}", foreach={"i": "range(50)", "j": "range(20)"}),
            job("merge_{i}", deps=["part_{i}_*"], foreach={"i": "range(50)"}),
        ]
    )
    assert fan.job("merge_7").deps == tuple(f"part_7_{j}" for j in range(20))
    # A pattern that starts with a wildcard tries every name: 2000 distinct ones over 4000 jobs is too much.
    found = problems(
        jobs=[job("a_{i}", foreach={"i": "range(2000)"}), job("b_{i}", deps=["*a_{i}"], foreach={"i": "range(2000)"})]
    )
    assert any(
        "field 'deps': matching the deps patterns of the request tries over 1000000 job names" in problem
        for problem in found
    ), found[:3]


def test_dependency_edges_are_limited() -> None:
    found = problems(
        jobs=[job("s_{i}", foreach={"i": "range(1000)"}), job("m_{i}", deps=["s_*"], foreach={"i": "range(1100)"})]
    )
    assert found == ["job 'm_1000', field 'deps': the request has over 1000000 dependency edges by this job"]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"name": "two\nlines", "jobs": [job("a")]}, "field 'name': holds the control character '\\n'"),
        ({"name": "n" * 201, "jobs": [job("a")]}, "field 'name': is 201 characters long, over the limit of 200"),
        ({"priority": 1e10, "jobs": [job("a")]}, "field 'priority': must be a number of seconds within -1e+09..1e+09"),
        ({"rules": {"a rule": {"command": "x"}}, "jobs": [job("a")]}, "rule 'a rule': a rule name is 1 to 200"),
        ({"jobs": [job("a", ete="2 * 365d")]}, "job 'a', field 'ete': '2 * 365d' gives 63072000 s, outside 0.."),
        ({"jobs": [job("a", ete=2 * 365 * 86400)]}, "job 'a', field 'ete': must be a number of seconds within 0.."),
        (
            {"jobs": [job("a", requirements={f"N{i}": 1 for i in range(65)})]},
            "job 'a', field 'requirements': at most 64 requirement names are allowed, got 65",
        ),
    ],
)
def test_request_fields_are_within_their_limits(data: dict[str, Any], fragment: str | None) -> None:
    assert any(fragment in problem for problem in problems(**data))


def test_long_problem_lists_are_cut_in_the_message_but_kept_whole() -> None:
    with pytest.raises(WorkflowError) as info:
        wf(jobs=[job(f"j{i}", f"x {{m{i}}}") for i in range(80)])
    assert len(info.value.problems) == 80
    assert "... and 70 more" in str(info.value)


# ---------------------------------------------------------------------------------------- outputs


def test_parse_outputs() -> None:
    text = "# produced by the payload\n\nout_mb=42\n path = /tmp/a b \nout_mb=43\nempty=\n"
    assert parse_outputs(text) == {"out_mb": "43", "path": "/tmp/a b", "empty": ""}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("no equals sign", "line 1 is not KEY=VALUE"),
        ("ok=1\n2bad=3", "line 2 is not KEY=VALUE"),
        ("a.b=1", "line 1 is not KEY=VALUE"),
        ("k=" + "x" * 5000, "over 4096 characters"),
        ("\n".join(f"k{i}=1" for i in range(101)), "more than 100 outputs"),
    ],
)
def test_parse_outputs_refusals(text: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_outputs(text, job="p1")
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"job 'p1', field '{OUTPUTS_ENV}'")


# --------------------------------------------------------------------------------------- examples


def load_example(name: str, work: Path | None = None) -> Workflow:
    path = EXAMPLES / name
    data = tomllib.loads(path.read_text())
    if work is not None:
        data["params"]["work"] = str(work)
    return parse_workflow(data, str(path))


def run_workflow(workflow: Workflow, tmp_path: Path) -> dict[str, dict[str, str]]:
    """Run every job in order as the pilot would; returns the outputs each job reported."""
    outputs: dict[str, dict[str, str]] = {}
    for name in workflow.order:
        template = workflow.job(name)
        dep_outputs = {dep: outputs[dep] for dep in template.deps}
        requirements = evaluate_deferred(template, dep_outputs)
        parse_requirements(requirements, job=name)  # what the submission chain will check
        command = render_command(template, dep_outputs)
        scratch = tmp_path / "scratch" / name
        scratch.mkdir(parents=True)
        outputs_file = scratch / "outputs"
        outputs_file.touch()
        env = {**os.environ, OUTPUTS_ENV: str(outputs_file), "TMPDIR": str(scratch)}
        result = subprocess.run(
            ["sh", "-c", command], env=env, cwd=scratch, capture_output=True, text=True, timeout=10, check=False
        )
        assert result.returncode == 0, f"{name}: {command!r} failed: {result.stderr}"
        outputs[name] = parse_outputs(outputs_file.read_text(), job=name)
    return outputs


@pytest.mark.parametrize("name", ["small-dag.toml", "mixed-batch.toml", "montage.toml"])
def test_examples_load_from_disk(name: str) -> None:
    workflow = load_workflow(EXAMPLES / name)
    assert workflow.order


def test_small_dag_runs_and_a_dependent_reads_an_output(tmp_path: Path) -> None:
    workflow = load_example("small-dag.toml", tmp_path / "work")
    assert len(workflow.jobs) == 8
    assert workflow.job("scale").command_deferred
    assert workflow.job("scale").deferred == {"mem": "max(100M, 100M + deps.fetch.lines / 10)"}
    outputs = run_workflow(workflow, tmp_path)
    assert outputs["fetch"] == {"lines": "1000"}
    assert outputs["total"] == {"sum": "500500"}
    assert evaluate_deferred(workflow.job("scale"), outputs)["mem"] == 200
    assert (tmp_path / "work" / "scaled.txt").read_text() == "scaled: 500500 x 2\n"
    report = (tmp_path / "work" / "report.txt").read_text()
    assert "scaled: 500500 x 2" in report


def test_montage_runs_with_its_shape(tmp_path: Path) -> None:
    workflow = load_example("montage.toml", tmp_path / "work")
    assert len(workflow.jobs) == 42
    counts: dict[str, int] = {}
    for template in workflow.jobs:
        stage = template.name.split("_")[0]
        counts[stage] = counts.get(stage, 0) + 1
    assert counts == {
        "mArchiveGet": 8,
        "mProject": 8,
        "mImgtbl": 2,
        "mOverlaps": 1,
        "mDiffFit": 10,
        "mConcatFit": 1,
        "mBgModel": 1,
        "mBackground": 8,
        "mAdd": 1,
        "mShrink": 1,
        "mJPEG": 1,
    }
    assert workflow.job("mProject_3").requirements["mem"] == 300  # 3 x tile_size, computed at load
    assert len(workflow.job("mConcatFit").deps) == 10
    outputs = run_workflow(workflow, tmp_path)
    assert outputs["mImgtbl_corr"] == {"n_images": "8"}
    assert evaluate_deferred(workflow.job("mAdd"), outputs)["mem"] == 800
    mosaic = int(outputs["mAdd"]["mosaic_bytes"])
    assert (tmp_path / "work" / "small.fits").stat().st_size == mosaic // 4
    assert (tmp_path / "work" / "mosaic.jpg.gz").exists()


def test_mixed_batch_runs(tmp_path: Path) -> None:
    run_workflow(load_example("mixed-batch.toml"), tmp_path)


def _eligible(catalog: Catalog, template: JobTemplate, outputs: dict[str, dict[str, str]]) -> list[str]:
    requirements = parse_requirements(evaluate_deferred(template, outputs), job=template.name)
    return [queue.id for queue in catalog.queues() if queue.reason(requirements) is None]


def test_mixed_batch_matches_the_example_catalog() -> None:
    catalog = Catalog.load(EXAMPLES / "catalog.toml")
    workflow = load_example("mixed-batch.toml")
    classes: set[str] = set()
    sites: set[str] = set()
    cores: set[int] = set()
    for template in workflow.jobs:
        queues = _eligible(catalog, template, {})
        assert queues, f"{template.name} fits no queue of catalog.toml"
        requirements = parse_requirements(template.requirements, job=template.name)
        classes.add(requirements.tq_id)
        cores.add(requirements.cpu)
        sites.update(queue.split("/")[0] for queue in queues)
    assert cores == {1, 2, 4}
    assert len(classes) >= 6
    assert sites == {"LCG.CERN.ch", "LCG.RAL.uk", "local"}


@pytest.mark.parametrize("name", ["small-dag.toml", "montage.toml"])
def test_dag_examples_fit_the_local_queue(name: str) -> None:
    catalog = Catalog.load(EXAMPLES / "catalog.toml")
    workflow = load_example(name)
    fake_outputs = {"fetch": {"lines": "1000"}, "total": {"sum": "1"}, "mImgtbl_corr": {"n_images": "8"}}
    for template in workflow.jobs:
        outputs = {dep: fake_outputs.get(dep, {}) for dep in template.deps}
        assert "local/localhost/local" in _eligible(catalog, template, outputs), template.name
