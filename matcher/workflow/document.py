"""The sections of a workflow document that are not jobs: its header, its ``params`` and its ``rules``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from matcher.limits import MAX_NAME, MAX_PRIORITY, RULE_NAME_RE, RULE_NAME_RULE, check_number, check_text
from taskqueues.errors import ValidationError, shown
from taskqueues.store import check_account_name
from taskqueues.webhook import check_webhook

from .model import Collector, Rule

__all__ = [
    "IDENT_RE",
    "RESERVED_PARAMS",
    "parse_header",
    "parse_identity",
    "parse_notify",
    "parse_params",
    "parse_rules",
]

_TOP_KEYS = frozenset({"name", "description", "priority", "params", "rules", "jobs", "owner", "group", "notify"})
_RULE_KEYS = frozenset({"command", "requirements", "ete"})
RESERVED_PARAMS = frozenset({"job", "deps"})
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_header(data: Mapping[str, Any], out: Collector) -> tuple[str, str, float]:
    """The request's ``name``, ``description`` and ``priority`` (seconds); unknown top-level fields are problems."""
    for key in sorted(set(data) - _TOP_KEYS, key=str):
        out.add(f"unknown top-level field (known: {', '.join(sorted(_TOP_KEYS))})", field=key)
    try:
        name = check_text(data.get("name"), job=None, field="name", limit=MAX_NAME, line=True)
        if not name.strip():
            raise ValidationError("must not be blank", field="name")
    except ValidationError as exc:
        out.problems.append(str(exc))
        name = ""
    description = data.get("description", "")
    if not isinstance(description, str):
        out.add(f"must be a string, not {type(description).__name__}", field="description")
        description = ""
    priority = data.get("priority", 0)
    try:
        check_number(
            priority, job=None, field="priority", low=-MAX_PRIORITY, high=MAX_PRIORITY, what="a number of seconds"
        )
    except ValidationError as exc:
        out.problems.append(str(exc))
        priority = 0
    return name, description, float(priority)


def parse_notify(data: Mapping[str, Any], out: Collector) -> str:
    """The request's ``notify`` webhook ("" when absent)."""
    value = data.get("notify", "")
    try:
        return check_webhook(value) if value != "" else ""
    except ValidationError as exc:
        out.problems.append(str(exc))
        return ""


def parse_identity(data: Mapping[str, Any], out: Collector) -> tuple[str, str]:
    """The request's ``owner`` and ``group`` ("" when absent: the submitter's defaults apply)."""
    found = []
    for key in ("owner", "group"):
        value = data.get(key, "")
        try:
            found.append(check_account_name(value, key) if value != "" else "")
        except ValidationError as exc:
            out.problems.append(str(exc))
            found.append("")
    return found[0], found[1]


def parse_params(value: object, out: Collector, owner: str, field: str) -> dict[str, object]:
    """The valid ``name = value`` pairs of a params table (the request's, a job's, a foreach row's)."""
    if not isinstance(value, Mapping):
        out.add(f"must be a table of name = value, not {type(value).__name__}", owner=owner, field=field)
        return {}
    params: dict[str, object] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not IDENT_RE.fullmatch(name):
            out.add(
                f"parameter name {shown(name)} must be an identifier (letters, digits, _)", owner=owner, field=field
            )
        elif name in RESERVED_PARAMS:
            out.add(f"parameter name {name!r} is reserved", owner=owner, field=field)
        elif not isinstance(item, str | int | float | bool):
            out.add(
                f"parameter {shown(name)} must be a string, a number or a boolean, not {type(item).__name__}",
                owner=owner,
                field=field,
            )
        else:
            params[name] = item
    return params


def parse_rules(value: object, out: Collector) -> dict[str, Rule]:
    """The valid rules of the ``rules`` table, by name."""
    if not isinstance(value, Mapping):
        out.add(f"must be a table of rules, not {type(value).__name__}", field="rules")
        return {}
    rules: dict[str, Rule] = {}
    for name, spec in value.items():
        where = f"rule {shown(name, MAX_NAME)}"
        if not isinstance(name, str) or not RULE_NAME_RE.fullmatch(name):
            out.add(RULE_NAME_RULE, owner=where)
            continue
        if not isinstance(spec, Mapping):
            out.add(f"must be a table, not {type(spec).__name__}", owner=where)
            continue
        for key in sorted(set(spec) - _RULE_KEYS, key=str):
            out.add(f"unknown field (known: {', '.join(sorted(_RULE_KEYS))})", owner=where, field=key)
        command = spec.get("command")
        if command is not None and not isinstance(command, str):
            out.add(f"must be a string, not {type(command).__name__}", owner=where, field="command")
            command = None
        requirements = spec.get("requirements", {})
        if not isinstance(requirements, Mapping):
            out.add(f"must be a table, not {type(requirements).__name__}", owner=where, field="requirements")
            requirements = {}
        rules[name] = Rule(name, command, dict(requirements), spec.get("ete"))
    return rules
