"""Hostile workflow documents for the submission fuzz tests: hypothesis strategies and file writers.

A document is what ``tomllib``/``json`` would give: nested dicts, lists and scalars. :func:`write_doc`
writes one as a TOML or a JSON file with our own emitters, so that values no serialiser would produce
on purpose still reach the loader: NaN and infinities, integers of thousands of digits (:class:`Digits`),
lone surrogates and control characters (escaped as each format allows), and :class:`Deep` markers that
stand for a nesting deeper than any parser's recursion limit (emitted as raw brackets).

``mutated_docs`` draws a valid document (:func:`valid_docs`) and applies one hostile change to it,
returning with it the ``(job, field)`` the change is about, so a test can check that a refusal names
them; ``junk_docs`` draws shapeless documents where only the general contract can be checked.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st


@dataclass(frozen=True)
class Deep:
    """A list nested ``depth`` times, written as raw brackets (``[[[...]]]``)."""

    depth: int


@dataclass(frozen=True)
class Digits:
    """An integer of ``count`` digits, over Python's int-to-text limit (so it cannot be an ``int`` here)."""

    count: int


# ----------------------------------------------------------------------------------------------- values

HUGE = 1_000_001  # "megabyte strings": over every size limit of the submission path

#: Texts aimed at the template renderer, the expression evaluator, the store's JSON and Redis keys.
EVIL_TEXT: tuple[str, ...] = (
    "{__class__}",
    "{job.__class__}",
    "{job[0]}",
    "{0}",
    "{}",
    "{job!a}",
    "{job:{job}}",
    "{job:>99999}",
    "{n:c}",
    "{big:c}",
    "{neg:c}",
    "{sur:c}",
    "{job:c}",
    "{n:,}",
    "{job:%}",
    "{{job}}",
    "{",
    "}",
    "{job",
    "{deps.j0.out}",
    "{deps.j0.__class__}",
    "{deps..}",
    "__import__('os').system('id')",
    "().__class__.__bases__[0].__subclasses__()",
    "job.__class__",
    "9**9**9",
    "10**10**10",
    "2**64",
    "(1e-18)**-64",
    "(1e-10)**-40",
    "tiny ** -64",
    "0**-1",
    "(-8)**(1/3)",
    "1e999",
    "1e30*1e30",
    "-1e18*10",
    "big * big",
    "round(1e18, 30)",
    "round(1, 1e9)",
    "ceil(1e300)",
    "abs(-9223372036854775808)",
    "1e30G",
    "max()",
    "min(1,)",
    "1 if 1",
    "1 if 1 else",
    "n / 0",
    "n // 0",
    "n % 0",
    "n ** n ** n",
    "deps.j0.out",
    "deps.j0.out.x",
    "deps.j0[0]",
    "lambda: 1",
    "%s%s%s%n",
    "$(rm -rf /)",
    "${HOME}",
    "`id`",
    "'; DROP TABLE jobs; --",
    '"},"s":"running","a":9,"x":"',
    '{"s":"running"}',
    "redis.call('FLUSHALL')",
    "]]..redis.call('flushall')..[[",
    "pf:{default}:jobs",
    "\\u0000",
    "\x00",
    "a\x00b",
    "\ud800",
    "\udfff",
    "x\ud83dy",
    "\n\r\t\x0b\x0c\x1c\x85\u2028",
    "\u202e",
    "\U0001f4a5",
    "",
    " ",
    "4G",
    "-4G",
    "1:30:00",
    "2-00:00:00",
    "1h30m",
    "1e3",
    "NaN",
    "inf",
    "-0",
    "--1",
    "+-1",
    "-0.5",
    "\u0664",
    "\u0661\u0660m",
)


def _repeat(shape: tuple[str, str, str], count: int) -> str:
    opening, core, closing = shape
    return opening * count + core + closing * count


#: Long and deep texts, built when drawn (so that failure reports stay readable): nesting past every
#: depth limit, chains past the tree limit, numbers of thousands of digits, megabyte strings.
LONG_TEXT = st.builds(
    _repeat,
    st.sampled_from(
        [
            ("(", "1", ")"),
            ("-", "1", ""),
            ("not ", "1", ""),
            ("1+", "1", ""),
            ("max(", "1", ")"),
            ("1 if 1 else ", "1", ""),
            ("2**", "2", ""),
            ("9", "", ""),
            ("1", "0", ""),
            ("{job}", "", ""),
            ("a", "", ""),
            ("\x00", "", ""),
            ("é", "", ""),
            ("{big}", "", ""),
        ]
    ),
    st.sampled_from([45, 60, 200, 501, 5000, 70_000, HUGE]),
)

INTS = st.sampled_from([0, 1, -1, 2, 7, 4096, 4097, 2**31, 2**53, 2**53 + 1, 2**63 - 1, -(2**63), 10**30])
FLOATS = st.sampled_from(
    [0.5, -0.5, -0.0, 1.5, 1e-300, 5e-324, 1e16, 1e18, 1e300, 1.7976931348623157e308, math.inf, -math.inf, math.nan]
)
BIG_INTS = st.builds(Digits, st.sampled_from([4400, 5000, 200_000]))
TEXT = st.one_of(st.sampled_from(EVIL_TEXT), st.text(max_size=12), LONG_TEXT)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, BIG_INTS, TEXT)
#: TOML has no null: a None there is a key left out, so a change meant to be wrong must not be None.
PRESENT = st.deferred(lambda: JUNK.filter(lambda value: value is not None))
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=6,
) | st.builds(Deep, st.sampled_from([60, 5_000, 200_000]))


#: Amounts every requirement must refuse (issue 32): expressions that fail or overflow, negative or
#: non-finite numbers, digits other than 0-9, doubled signs.
BAD_AMOUNTS: tuple[object, ...] = (
    "9**9**9",
    "1/0",
    "n % 0",
    "10**19",
    -0.5,
    "-0.5",
    "n - 5",
    math.nan,
    math.inf,
    -math.inf,
    "\u0664",
    "\u0661\u0660m",
    "2 * \u0664G",
    "--1",
    "+-1",
    "- -1",
    "n * --1",
)

# ------------------------------------------------------------------------------------ valid documents

REQUIREMENT_NAMES = (
    "cpu",
    "mem",
    "tmp",
    "wall",
    "Platform",
    "SoftwareTag",
    "MaxMemory",
    "InstanceType",
    "BackendOptions",
    "gpu",
    "ete",
)
JOB_FIELDS = ("name", "rule", "command", "params", "requirements", "deps", "key", "ete", "foreach")
TOP_FIELDS = ("name", "description", "priority", "params", "rules", "jobs")


@st.composite
def valid_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A small workflow every part of the chain accepts: a DAG of 1 to 5 jobs over the test catalog."""
    doc: dict[str, Any] = {"name": "fuzz", "params": {"n": draw(st.integers(1, 4)), "size": "300M"}}
    if draw(st.booleans()):
        doc["rules"] = {"r": {"command": "echo {job} {n}", "requirements": {"cpu": 1, "mem": "2 * size"}, "ete": "30s"}}
    jobs = []
    for index in range(draw(st.integers(1, 5))):
        job: dict[str, Any] = {"name": f"j{index}"}
        if "rules" in doc and draw(st.booleans()):
            job["rule"] = "r"
        else:
            job["command"] = draw(st.sampled_from(["true", "echo {job}", "sleep 0.{n}", "echo 'a b' > /dev/null"]))
            job["requirements"] = draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "cpu": st.integers(1, 4),
                        "mem": st.sampled_from(["100M", "1G", 512, "max(100M, size)"]),
                        "Platform": st.sampled_from(["EL9", "EL8"]),
                        "wall": st.sampled_from(["1h", 600]),
                    },
                )
            )
        earlier = [f"j{i}" for i in range(index)]
        if earlier:
            job["deps"] = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2))
        jobs.append(job)
    doc["jobs"] = jobs
    return doc


# -------------------------------------------------------------------------------------------- changes


@dataclass(frozen=True)
class Change:
    """One hostile change. A refusal must name one of ``jobs`` (when any) and one of ``fields`` (when any):
    a change can make another part wrong too (a renamed job breaks its dependents' ``deps``).
    ``must_refuse`` when the change is wrong whatever was drawn."""

    what: str
    jobs: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    must_refuse: bool = False

    def as_written(self, kind: str) -> Change:
        """The change as the file tells it: TOML cannot write a lone surrogate, :func:`write_doc` puts U+FFFD."""
        if kind != "toml":
            return self
        return Change(
            self.what, tuple(map(_toml_chars, self.jobs)), tuple(map(_toml_chars, self.fields)), self.must_refuse
        )


def _toml_chars(text: str) -> str:
    return "".join("\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else char for char in text)


def _keys_of(value: Any) -> tuple[str, ...]:
    return tuple(str(key) for key in value) if isinstance(value, dict) else ()


@st.composite
def mutated_docs(draw: st.DrawFn) -> tuple[dict[str, Any], Change]:
    """A valid document with one hostile change, and what that change is about."""
    doc = copy.deepcopy(draw(valid_docs()))
    jobs = doc["jobs"]
    job = jobs[draw(st.integers(0, len(jobs) - 1))]
    name = job["name"]
    kind = draw(
        st.sampled_from(
            [
                "job_field",
                "requirement",
                "unknown_requirement",
                "unknown_top",
                "unknown_job_field",
                "self_dep",
                "cycle",
                "unknown_dep",
                "duplicate",
                "template",
                "expression",
                "bad_amount",
                "top_field",
                "rule_field",
            ]
        )
    )
    if kind == "job_field":
        field = draw(st.sampled_from(JOB_FIELDS))
        job[field] = value = draw(JUNK)
        if field == "name":
            return doc, Change(kind, (), ("name", "deps", "foreach"))
        if field == "rule":  # a job left without its rule may be left without a command
            return doc, Change(kind, (name,), ("rule", "command"))
        return doc, Change(kind, (name,), (field, *_keys_of(value)))
    if kind == "bad_amount":
        field = draw(st.sampled_from(["mem", "cpu", "wall", "tmp", "MaxMemory"]))
        job.setdefault("requirements", {})[field] = draw(st.sampled_from(BAD_AMOUNTS))
        return doc, Change(kind, (name,), (field,), True)
    if kind in ("requirement", "unknown_requirement", "expression"):
        if kind == "requirement":
            field, value = draw(st.sampled_from(REQUIREMENT_NAMES)), draw(JUNK)
        elif kind == "expression":
            field, value = draw(st.sampled_from(["mem", "cpu", "wall", "tmp", "MaxMemory"])), draw(TEXT)
            doc["params"].update(big=10**18, tiny=1e-18, neg=-1, sur=0xD800)
        else:
            field, value = "X" + draw(TEXT), draw(st.one_of(st.just("yes"), PRESENT))
        job.setdefault("requirements", {})[field] = value
        return doc, Change(kind, (name,), (field,), kind == "unknown_requirement")
    if kind == "unknown_top":
        field = "x" + draw(TEXT)
        doc[field] = draw(PRESENT)
        return doc, Change(kind, (), (field,), True)
    if kind == "unknown_job_field":
        field = "x" + draw(TEXT)
        job[field] = draw(PRESENT)
        return doc, Change(kind, (name,), (field,), True)
    if kind == "self_dep":
        job["deps"] = [*job.get("deps", []), name]
        return doc, Change(kind, (name,), ("deps",), True)
    if kind == "cycle":
        other = jobs[draw(st.integers(0, len(jobs) - 1))]
        job["deps"] = [*job.get("deps", []), other["name"]]
        other["deps"] = [*other.get("deps", []), name]
        return doc, Change(kind, (name, other["name"]), ("deps",), True)
    if kind == "unknown_dep":
        ghost = draw(st.one_of(st.just("ghost"), TEXT))
        job["deps"] = [*job.get("deps", []), ghost]
        # Any text may render to, or match, a real job: only the plain unknown name must be refused.
        return doc, Change(kind, (name,), ("deps",), ghost == "ghost")
    if kind == "duplicate":
        jobs.append(copy.deepcopy(job))
        return doc, Change(kind, (name,), ("name",), True)
    if kind == "template":
        job.pop("rule", None)
        job["command"] = draw(TEXT)
        doc["params"].update(big=10**18, neg=-1, sur=0xD800)
        return doc, Change(kind, (name,), ("command",))
    if kind == "top_field":
        field = draw(st.sampled_from(TOP_FIELDS))
        doc[field] = draw(JUNK)
        # Junk params or rules make the jobs that use them wrong: those are named, not the table.
        return doc, Change(kind, (), (field,) if field in ("name", "description", "priority") else ())
    doc.setdefault("rules", {})["r"] = {draw(st.sampled_from(["command", "requirements", "ete"])): draw(JUNK)}
    return doc, Change(kind)


@st.composite
def junk_docs(draw: st.DrawFn) -> Any:
    """Shapeless documents: junk at the top, or the right keys holding junk."""
    if draw(st.booleans()):
        return draw(JUNK)
    jobs = draw(
        st.one_of(JUNK, st.lists(st.dictionaries(st.sampled_from(JOB_FIELDS) | TEXT, JUNK, max_size=5), max_size=3))
    )
    return {
        "name": draw(st.one_of(st.just("w"), JUNK)),
        "jobs": jobs,
        **draw(st.dictionaries(st.sampled_from(TOP_FIELDS[1:]) | TEXT, JUNK, max_size=2)),
    }


# -------------------------------------------------------------------------------------------- writing


def _json(value: Any) -> str:
    if isinstance(value, Deep):
        return "[" * value.depth + "]" * value.depth
    if isinstance(value, Digits):
        return "1" + "0" * (value.count - 1)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json(str(k))}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_json(v) for v in value) + "]"
    return json.dumps(value)  # NaN, Infinity and lone surrogates (as \udXXX) included, as json.loads reads them


def _toml_text(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")  # TOML has no way to write a lone surrogate
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml(value: Any) -> str:
    if isinstance(value, Deep):
        return "[" * value.depth + "]" * value.depth
    if isinstance(value, Digits):
        return "1" + "0" * (value.count - 1)
    if isinstance(value, dict):
        items = [f"{_toml_text(str(k))} = {_toml(v)}" for k, v in value.items() if v is not None]
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value if v is not None) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    return _toml_text(str(value))


def write_doc(doc: Any, directory: Path, kind: str) -> Path:
    """Write ``doc`` as ``w.toml`` or ``w.json`` in ``directory`` (TOML drops None: it has no null)."""
    path = directory / f"w.{kind}"
    if kind == "json":
        path.write_text(_json(doc), encoding="utf-8", errors="surrogatepass")
    elif isinstance(doc, dict):
        path.write_text(
            "".join(f"{_toml_text(str(k))} = {_toml(v)}\n" for k, v in doc.items() if v is not None), encoding="utf-8"
        )
    else:
        path.write_text(f"value = {_toml(doc)}\n", encoding="utf-8")
    return path
