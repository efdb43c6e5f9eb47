"""The safe expression language and the strict templates of matcher.workflow.expr."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.workflow.expr import (
    MAX_LENGTH,
    MAX_MAGNITUDE,
    MAX_RENDERED,
    ExprError,
    dep_refs,
    evaluate,
    names,
    parse_quantity,
    render,
    template_dep_refs,
    template_names,
)
from taskqueues.errors import ValidationError


def err(text: str, params: dict[str, object] | None = None, **kwargs: object) -> ExprError:
    with pytest.raises(ExprError) as info:
        evaluate(text, params, **kwargs)  # type: ignore[arg-type]
    return info.value


# ------------------------------------------------------------------------------------------ numbers


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("2.5", 2.5),
        (".5", 0.5),
        ("1e3", 1000),
        ("512M", 512),
        ("512MB", 512),
        ("512m", 512),
        ("4G", 4000),
        ("4gb", 4000),
        ("1.5G", 1500),
        ("2T", 2_000_000),
        ("1P", 10**9),
        ("100K", 0.1),
        ("2000000B", 2),
        ("1Gi", 1073.741824),
        ("1Mi", 1.048576),
    ],
)
def test_size_literals_are_mb_decimal(text: str, value: float) -> None:
    assert evaluate(text) == pytest.approx(value)
    assert type(evaluate(text)) is type(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [("30s", 30), ("5m", 300), ("2h", 7200), ("1d", 86400), ("1w", 604800), ("1.5h", 5400), ("90", 90)],
)
def test_duration_literals_are_seconds(text: str, value: int) -> None:
    assert evaluate(text, kind="duration") == value


def test_the_kind_decides_what_m_means() -> None:
    assert evaluate("30m") == 30
    assert evaluate("30m", kind="duration") == 1800


def test_a_unit_of_the_other_kind_is_an_error_naming_it() -> None:
    assert "duration unit 's' in a size" in err("30s").reason
    assert "size unit 'g' in a duration" in err("4G", kind="duration").reason
    assert err("1 + 4G", kind="duration").position == 4


def test_unknown_unit() -> None:
    error = err("4X")
    assert "unknown unit 'x'" in error.reason
    assert error.position == 1


# --------------------------------------------------------------------------------------- operators


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("8 / 2", 4),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("2 ** 10", 1024),
        ("2 ** 3 ** 2", 512),
        ("-2 ** 2", -4),
        ("2 ** -1", 0.5),
        ("-(-3)", 3),
        ("2 - -3", 5),
        ("2 - (+3)", -1),
        ("+3", 3),
        ("10 - 2 - 3", 5),
        ("100 / 10 / 5", 2),
        ("2 * 300M", 600),
        ("max(512M, 2 * 300M)", 600),
        ("min(1, 2, 3)", 1),
        ("max(4)", 4),
        ("ceil(2.1)", 3),
        ("floor(2.9)", 2),
        ("round(2.5)", 2),
        ("round(3.14159, 2)", 3.14),
        ("abs(-4)", 4),
        ("ceil(3500M / 1G)", 4),
        ("1 if 2 > 1 else 0", 1),
        ("1 if 2 < 1 else 0", 0),
        ("1 if 0 else 2 if 0 else 3", 3),
        ("5 if 0 < 3 < 4 else 6", 5),
        ("5 if 0 < 3 > 4 else 6", 6),
        ("1 if 2 >= 2 and 3 != 4 else 0", 1),
        ("1 if 2 <= 1 or 3 == 3 else 0", 1),
        ("1 if not 0 else 0", 1),
        ("(2 > 1) + 1", 2),
        ("2.5 * 2", 5),
    ],
)
def test_arithmetic(text: str, value: float) -> None:
    assert evaluate(text) == pytest.approx(value)


def test_whole_results_are_ints() -> None:
    assert isinstance(evaluate("2.5 * 2"), int)
    assert isinstance(evaluate("1.5G"), int)
    assert isinstance(evaluate("7 / 2"), float)


def test_a_truth_value_is_not_a_result() -> None:
    assert "truth value" in err("1 < 2").reason


def test_and_or_short_circuit() -> None:
    assert evaluate("1 if 0 and 1 / 0 else 2") == 2
    assert evaluate("1 if 1 or 1 / 0 else 2") == 1
    assert evaluate("1 if 1 else 1 / 0") == 1


# ------------------------------------------------------------------------------------------- names


def test_parameters_numbers_and_quantities() -> None:
    params = {"n": 4, "size": "300M", "half": 0.5, "flag": True, "walltime": "2h"}
    assert evaluate("max(512M, 2 * size)", params) == 600
    assert evaluate("n * half", params) == 2
    assert evaluate("1 if flag else 2", params) == 1
    assert evaluate("walltime / 2", params, kind="duration") == 3600
    assert evaluate("size", {"size": " 1.5 G "}) == 1500
    assert evaluate("size", {"size": "-2"}) == -2


def test_unknown_name() -> None:
    error = err("2 * sizee", {"size": 1})
    assert error.name == "sizee"
    assert error.position == 4
    assert "unknown name 'sizee'" in str(error)


def test_non_numeric_parameter() -> None:
    error = err("2 * input", {"input": "a.fits"})
    assert error.name == "input"
    assert "parameter 'input' is not a number" in error.reason
    assert "a.fits" in error.reason
    assert "parameter 'x' is not a number (it is a list)" in err("x", {"x": [1, 2]}).reason


def test_dependency_outputs() -> None:
    deps: dict[str, dict[str, object]] = {"p1": {"out_mb": "12", "took": "2m"}, "fit-2": {"n": 3}}
    assert evaluate("2 * deps.p1.out_mb", {}, deps) == 24
    assert evaluate("deps.fit-2.n + 1", {}, deps) == 4
    assert evaluate("deps.p1.took", {}, deps, kind="duration") == 120
    assert evaluate("deps.p1.out_mb-deps.fit-2.n", {}, deps) == 9


def test_dependency_output_errors() -> None:
    assert "only known once job 'p1' has finished" in err("deps.p1.out").reason
    assert "no outputs from dependency 'p2'" in err("deps.p2.x", {}, deps={"p1": {}}).reason
    missing = err("deps.p1.size", {}, deps={"p1": {"out": "1"}})
    assert "did not report 'size'" in missing.reason
    assert "out" in missing.reason
    assert missing.name == "deps.p1.size"
    assert "dependency output" in err("deps.p1.out", {}, deps={"p1": {"out": "xyz"}}).reason


def test_names_tells_whether_deps_are_needed() -> None:
    assert names("max(512M, 2 * size) + n") == {"size", "n"}
    assert names("2 * deps.p1.out_mb + x") == {"deps.p1.out_mb", "x"}
    assert dep_refs("deps.a.x + deps.b-c.y * z") == {("a", "x"), ("b-c", "y")}
    assert names("ceil(1.5)") == set()


# ------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("__import__('os')", "string literals"),
        ("__import__(1)", "unknown function '__import__'"),
        ("open(1)", "unknown function 'open'"),
        ("eval(1)", "unknown function 'eval'"),
        ("x.__class__", "attribute and index access"),
        ("(1).real", "unexpected character '.'"),
        ("x[0]", "attribute and index access"),
        ("lambda: 1", "'lambda' is not part of the language"),
        ("[x for x in y]", "unexpected character '['"),
        ("{1: 2}", "unexpected character '{'"),
        ("x = 1", "unexpected character '='"),
        ("1; 2", "unexpected character ';'"),
        ("deps.p1", "deps.<job>.<value>"),
        ("deps.p1.x.y", "deps.<job>.<value>"),
        ("", "empty expression"),
        ("1 +", "expected a number"),
        ("(1", "expected ')'"),
        ("1 2", "unexpected '2'"),
        ("1 if 2", "'if' without 'else'"),
        ("max()", "max() takes 1 or more argument(s), got 0"),
        ("ceil(1, 2)", "ceil() takes 1 argument(s), got 2"),
        ("round(1, 2, 3)", "round() takes 1 to 2 argument(s)"),
        ("--3", "malformed sign: '-' followed by '-'"),
        ("+-3", "malformed sign: '+' followed by '-'"),
        ("2 - - -3", "malformed sign: '-' followed by '-'"),
        ("\u0664", "the digit '\u0664' is not one of 0-9"),
        ("1\u0660", "the digit '\u0660' is not one of 0-9"),
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("2 ** 65", "exponent 65 too large"),
        ("10 ** 19", "out of range"),
        ("10 ** 18 * 10", "out of range"),
        ("0.5 ** -64", "out of range"),
        ("(-8) ** 0.5", "not a real number"),
        ("1e400", "exponent too large"),
        ("1" * 50, "number too long"),
        ("round(1.5, 0.5)", "whole number"),
        ("if", "unexpected 'if'"),
    ],
)
def test_every_error_names_what_and_where(text: str, fragment: str) -> None:
    error = err(text)
    assert fragment in str(error)
    assert isinstance(error, ValidationError)
    assert repr(text)[:20] in str(error) or text == ""


def test_error_positions() -> None:
    assert err("1 + 2 / 0").position == 6
    assert err("2 ** 100").position == 2
    assert err("a.b").position == 1
    assert err("1 + foo(2)").position == 4
    assert err("1 + foo(2)").name == "foo"


def test_length_and_nesting_limits() -> None:
    assert "too long" in err("1+" * MAX_LENGTH + "1").reason
    assert evaluate("(" * 40 + "1" + ")" * 40) == 1
    assert "nested deeper" in err("(" * 41 + "1" + ")" * 41).reason
    assert "nested deeper" in err("-(" * 41 + "1" + ")" * 41).reason
    assert "nested deeper" in err("2**" * 41 + "1").reason
    assert "nested deeper" in err("max(" * 41 + "1" + ")" * 41).reason
    assert "nested deeper" in err("0 if 0 else " * 41 + "1").reason
    assert evaluate("+".join(["1"] * 100)) == 100
    assert "too complex" in err("+".join(["1"] * 200)).reason


def test_every_failure_is_an_expr_error_not_a_crash() -> None:
    # A fixed corpus of hostile inputs: each must end in ExprError, never another exception.
    hostile = [
        "().__class__.__bases__[0].__subclasses__()",
        "getattr(1, 'x')",
        "globals()",
        "__builtins__",
        "exec('1')",
        "9 ** 9 ** 9",
        "max(" * 500,
        ")" * 10,
        "1 if 1 else",
        "\x00",
        "1 ++ - + - 2 ** ** 3",
        "not",
        "deps.",
        "deps..x",
    ]
    for text in hostile:
        with pytest.raises(ExprError):
            evaluate(text)


@pytest.mark.parametrize("text", ["(1e-18) ** -64", "tiny ** -64", "(1e-10) ** -40", "0.5 ** -64", "tiny ** -2"])
def test_negative_powers_of_small_numbers_are_refused_before_they_overflow(text: str) -> None:
    # (1e-18) ** -64 is 1e1152: Python raises OverflowError for a float that large instead of giving inf.
    assert "out of range" in err(text, {"tiny": 1e-18}).reason


def _expression(leaves: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Expressions of the language's grammar over ``leaves``: every operator, call and conditional."""
    binary = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "<", "==", "!=", " and ", " or "])
    powers = st.tuples(leaves, leaves).map(lambda t: f"{t[0]} ** {t[1]}")  # the costly operator, often
    return st.recursive(
        leaves | powers,
        lambda inner: st.one_of(
            st.tuples(inner, binary, inner).map(lambda t: f"{t[0]}{t[1]}{t[2]}"),
            st.tuples(st.sampled_from(["-", "+", "not "]), inner).map("".join),
            inner.map(lambda e: f"({e})"),
            st.tuples(
                st.sampled_from(["min", "max", "ceil", "floor", "round", "abs"]),
                st.lists(inner, min_size=1, max_size=3),
            ).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
            st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} if {t[1]} else {t[2]}"),
        ),
        max_leaves=12,
    )


EXTREMES = st.sampled_from(
    [
        "0",
        "1",
        "9",
        "64",
        "-64",
        "65",
        "-19",
        "0.5",
        "1e-30",
        "1e30",
        "1e18",
        "999999999999999999",
        "4G",
        "1Pi",
        "2w",
        "big",
        "tiny",
        "neg",
        "text",
        "big9",
        "deps.j.out",
    ]
)


@settings(max_examples=400)
@given(_expression(EXTREMES), st.sampled_from(["size", "duration"]))
def test_grammar_fuzz_gives_a_bounded_number_or_an_expr_error(text: str, kind: str) -> None:
    params = {"big": 10**18, "tiny": 1e-18, "neg": -1, "text": "a.fits", "big9": "9e18"}
    try:
        result = evaluate(text, params, {"j": {"out": "1e-30"}}, kind=kind)  # type: ignore[arg-type]
    except ExprError:
        return
    assert isinstance(result, int | float) and not isinstance(result, bool)
    assert abs(result) <= MAX_MAGNITUDE


@given(st.text(alphabet="0123456789.+-*/%() ifelsandortmaxcegGMhd,<>=!x", max_size=60))
def test_fuzz_only_expr_errors(text: str) -> None:
    try:
        result = evaluate(text, {"x": 3})
    except ExprError:
        return
    assert isinstance(result, int | float)


def test_parse_quantity() -> None:
    assert parse_quantity("300M") == 300
    assert parse_quantity("2h", "duration") == 7200
    assert parse_quantity("+4") == 4
    with pytest.raises(ExprError):
        parse_quantity("4 G B")
    with pytest.raises(ExprError):
        parse_quantity("1" * 70)
    with pytest.raises(ExprError):
        parse_quantity("3 apples")


# --------------------------------------------------------------------------------------- templates


def test_render_placeholders_and_escapes() -> None:
    params = {"input": "a.fits", "i": 7, "x": 1.5, "flag": True}
    assert render("mProject {input} p{i}.fits", params) == "mProject a.fits p7.fits"
    assert render("p{i:03d} {x:.2f} {flag}", params) == "p007 1.50 True"
    assert render("echo {{literal}} {{{input}}}", params) == "echo {literal} {a.fits}"
    assert render("no placeholders", {}) == "no placeholders"


def test_render_shell_quote_conversion() -> None:
    assert render("cat {f!q}", {"f": "my file; rm -rf /"}) == "cat 'my file; rm -rf /'"
    assert render("{f!r}", {"f": "x"}) == "'x'"
    assert render("{f!s}", {"f": 3}) == "3"


def test_render_dependency_outputs() -> None:
    template = "echo {deps.p1.out} {n}"
    assert template_names(template) == {"deps.p1.out", "n"}
    assert template_dep_refs(template) == {("p1", "out")}
    assert render(template, {"n": 1}, {"p1": {"out": "x"}}) == "echo x 1"
    with pytest.raises(ExprError, match="only known once job 'p1' has finished"):
        render(template, {"n": 1})
    with pytest.raises(ExprError, match="did not report 'out'"):
        render(template, {"n": 1}, {"p1": {}})


@pytest.mark.parametrize(
    "value",
    ["1; touch X", "$(touch X)", "`touch X`", "a'b\"c", "x\ny && rm -rf /", "", " ", "-rf", "\u00e9\u2028|&<>*?"],
)
def test_dependency_outputs_are_data_never_code(value: str, tmp_path: Path) -> None:
    """Whatever a payload wrote to $PILOTFISH_OUTPUTS reaches its dependent's ``sh -c`` as one word: a real
    shell prints it back byte for byte and runs nothing of it."""
    for template in ("printf %s {deps.a.v}", "printf %s {deps.a.v!q}", "printf %s {deps.a.v:>3}"):
        command = render(template, {}, {"a": {"v": value}})
        done = subprocess.run(["/bin/sh", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=True)
        expected = format(value, ">3") if ":>3" in template else value
        assert done.stdout == expected, (template, command)
        assert list(tmp_path.iterdir()) == [], f"{command!r} ran something"
    assert render("n={deps.a.v}", {}, {"a": {"v": 12}}) == "n=12"  # a plain word is left as it is


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("{a.b}", "attribute and index access"),
        ("{a[0]}", "attribute and index access"),
        ("{a.__class__}", "attribute and index access"),
        ("{}", "positional"),
        ("{0}", "positional"),
        ("{a:{b}}", "nested placeholders"),
        ("{a:>1000000}", "width 1000000 over the limit"),
        ("{a:.999}", "precision 999 over the limit"),
        ("{a!a}", "unknown conversion !a"),
        ("{a", "bad braces"),
        ("a}", "bad braces"),
        ("{missing}", "unknown placeholder {missing}"),
        ("{lst}", "holds a list"),
        ("{a:d}", "Unknown format code"),
    ],
)
def test_render_refusals(template: str, fragment: str) -> None:
    with pytest.raises(ExprError) as info:
        render(template, {"a": "x", "lst": [1]})
    assert fragment in str(info.value)


@pytest.mark.parametrize(("value", "fragment"), [(10**18, "not in range"), (-1, "not in range"), (1.5, "Unknown")])
def test_render_format_tricks_are_expr_errors(value: object, fragment: str) -> None:
    # "{n:c}" of a number past U+10FFFF raised OverflowError, which no caller expected.
    with pytest.raises(ExprError, match=fragment):
        render("echo {n:c}", {"n": value})


def test_render_is_bounded_whatever_the_parameters() -> None:
    big = "x" * (MAX_RENDERED // 3)
    assert len(render("{b}{b}", {"b": big})) == 2 * len(big)
    with pytest.raises(ExprError, match=f"more than {MAX_RENDERED} characters"):
        render("{b}" * 1000, {"b": big})


def test_located_error_names_job_and_field() -> None:
    error = err("1/0").located(job="merge", field="mem")
    assert str(error).startswith("job 'merge', field 'mem': division by zero")
    assert error.job == "merge"
    assert error.field == "mem"
