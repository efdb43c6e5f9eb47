"""Jobs to :class:`~matcher.workflow.model.JobTemplate`: deps resolved, command and requirements compiled,
text and edges counted against the request's limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matcher.limits import MAX_EDGES
from taskqueues.errors import shown
from taskqueues.requirements import MAX_NAMES

from .expr import ExprError, render, template_dep_refs, template_names
from .foreach import Raw
from .model import Collector, JobTemplate, Rule
from .patterns import Patterns, resolve_deps
from .values import Deferred, check_names, read_ete_hint, requirement_value

__all__ = ["compile_jobs"]


def compile_jobs(raws: Sequence[Raw], rules: Mapping[str, Rule], out: Collector) -> list[JobTemplate]:
    """The jobs compiled in file order; it stops at the first limit the request passes (edges, patterns, text)."""
    patterns = Patterns([raw.name for raw in raws])
    jobs: list[JobTemplate] = []
    edges = 0
    for raw in raws:
        deps = resolve_deps(raw, patterns, out)
        if deps is None:
            break
        edges += len(deps)
        if edges > MAX_EDGES:
            out.add(f"the request has over {MAX_EDGES} dependency edges by this job", owner=raw.entry, field="deps")
            break
        jobs.append(_compile(raw, deps, rules, out))
        if out.full:
            break
    return jobs


def _text_size(value: object) -> int:
    """About how many characters ``value`` takes in a stored record."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(map(_text_size, value)) + 2
    return 8


def _env_text(env: Mapping[str, object]) -> int:
    """About how much text ``env`` adds to a stored job (its deferred requirements keep it whole)."""
    return sum(len(name) + _text_size(value) for name, value in env.items())


def _compile(raw: Raw, deps: tuple[str, ...], rules: Mapping[str, Rule], out: Collector) -> JobTemplate:
    spec, env, where = raw.spec, raw.env, raw.entry
    rule = rules.get(spec["rule"]) if isinstance(spec.get("rule"), str) else None
    needs: set[tuple[str, str]] = set()

    command = spec.get("command", rule.command if rule else None)
    command_deferred = False
    if not isinstance(command, str) or not command.strip():
        out.add("no command: give 'command' or a 'rule' that has one", owner=where, field="command")
        command = ""
    else:
        try:
            refs = template_dep_refs(command)
            command_problems = check_names(template_names(command), refs, env, deps)
            for problem in command_problems:
                out.add(problem, owner=where, field="command")
            needs |= refs
            command_deferred = bool(refs)
            if not command_deferred and not command_problems:
                command = render(command, env)
        except ExprError as exc:
            out.add(str(exc), owner=where, field="command")

    requirements: dict[str, object] = {}
    deferred: dict[str, str] = {}
    own = spec.get("requirements", {})
    if not isinstance(own, Mapping):
        out.add(f"must be a table, not {type(own).__name__}", owner=where, field="requirements")
        own = {}
    merged = {**(rule.requirements if rule else {}), **own}
    if len(merged) > MAX_NAMES:
        out.add(
            f"at most {MAX_NAMES} requirement names are allowed, got {len(merged)}", owner=where, field="requirements"
        )
        merged = {}
    for name, value in merged.items():
        if not isinstance(name, str) or not name:
            out.add(
                f"a requirement name must be a non-empty string, not {shown(name)}", owner=where, field="requirements"
            )
            continue
        outcome = requirement_value(name, value, env, deps, where, out)
        if isinstance(outcome, Deferred):
            deferred[name] = outcome.text
            needs |= outcome.refs
        else:
            requirements[name] = outcome

    ete_hint = read_ete_hint(spec.get("ete", rule.ete if rule else None), requirements, env, where, out)
    stored = len(command) + sum(map(_text_size, requirements.values()))
    if deferred or command_deferred:
        stored += _env_text(env) + sum(map(len, deferred.values()))
    out.spend(stored, where)
    return JobTemplate(
        name=raw.name,
        command=command,
        requirements=requirements,
        deps=deps,
        raw_requirements=merged,
        deferred=deferred,
        command_deferred=command_deferred,
        needs_outputs=frozenset(needs),
        key=raw.key,
        rule=rule.name if rule else None,
        ete_hint=ete_hint,
        params=env,
    )
