"""A small, safe arithmetic language for requirement values and ``{name}`` templates for commands.

Workflows compute requirements from their parameters ("memory = 2x the input size", as Seven Bridges
puts it) and from what their dependencies reported (``2 * deps.p1.out_mb``). That text comes from users,
so it is never given to Python's ``eval``, ``exec`` or ``compile``, nor to ``ast``: we tokenize and parse
it ourselves, with a grammar that has no strings, no attribute or index access, no assignment, no
lambdas and no comprehensions, and that calls only the six functions below. There is nothing in the
language that can reach an object, so there is nothing to escape from; the remaining risks are cost
and size, which are bounded (input length, nesting depth, magnitude of every intermediate value,
exponent size).

Language
    ============================  ===========================================================
    numbers                       ``3``, ``2.5``, ``1e3``, ``.5``
    units (no blank before)       see *Units* below: ``512M``, ``4G``, ``1.5G``, ``30s``, ``2h``
    arithmetic                    ``+ - * / // % **``, unary ``-``/``+``, parentheses
    comparisons                   ``< <= > >= == !=`` (chained as in Python: ``0 < x < 8``)
    logic                         ``and``, ``or``, ``not`` (give truth values)
    conditional                   ``a if c else b``
    functions                     ``min(a, b, ...)``, ``max(a, b, ...)``, ``ceil(x)``, ``floor(x)``,
                                  ``round(x[, digits])``, ``abs(x)``
    parameters                    a bare name: ``size``, ``n`` (the job's parameters)
    dependency outputs            ``deps.<job>.<value>``: the value the job named ``<job>`` reported
    ============================  ===========================================================

We chose the explicit ``deps.`` prefix (not ``<job>.<value>``) so that a parameter can never be
mistaken for a dependency, and so that :func:`names` tells at a glance whether an expression must wait
for its dependencies (then it is evaluated when the job is released, not at submission). A job name in
``deps.<job>.<value>`` is letters, digits, ``_`` and ``-``; a value name is an identifier.

A parameter or a dependency output may be a number, or a string holding one quantity (``"300M"``), which
is read with the same unit rule as a literal. Anything else (``"a.fits"``) is an error when used.
A truth value is accepted where a number is expected (``True`` is 1) except as the final result.

Units
    The suffix is read by the *kind* of value being computed, one clear rule in two lines:

    * ``kind="duration"`` (``wall``, ``ete``, names ending in ``time``): ``s m h d w`` are seconds,
      minutes, hours, days, weeks, and the result is in seconds. A size suffix there is an error.
    * ``kind="size"`` (everything else): ``B K M G T P`` (optional trailing ``B``: ``4GB``) are bytes and
      decimal kilo- to peta-bytes, ``Ki Mi Gi Ti Pi`` binary, and the result is in MB (1G = 1000 MB,
      as Machine/Job Features counts). A duration suffix there is an error.

    Suffixes are case-insensitive, so ``m`` is minutes in a duration and megabytes elsewhere; they are
    the tables of :mod:`taskqueues.units` (:data:`~taskqueues.units.SIZE_UNITS`,
    :data:`~taskqueues.units.DURATION_UNITS`). A bare number has no unit: MB in a size, seconds in a
    duration.

Limits
    At most :data:`MAX_LENGTH` characters, :data:`MAX_DEPTH` levels of nesting (parentheses, calls,
    unary operators, exponents, ``else`` branches), a tree at most :data:`MAX_TREE_DEPTH` deep, every
    intermediate value within ``±`` :data:`MAX_MAGNITUDE`, exponents within ``±`` :data:`MAX_EXPONENT`.
    Evaluation is a single walk of a tree no larger than the text, so its cost is bounded by the length
    limit, and its recursion by the depth limits.

Templates
    :func:`render` fills ``{name}`` placeholders with parameters (``{{`` and ``}}`` are literal braces).
    A placeholder is a bare name or the dependency form ``{deps.<job>.<value>}``; ``{a.b}``, ``{a[0]}``,
    ``{}`` and ``{0}`` are refused. A format spec is allowed (``{i:03d}``) with width and precision up to
    :data:`MAX_FORMAT_WIDTH`; the conversions are ``!s``, ``!r`` and ``!q`` (``shlex.quote``, for values
    placed in a shell command). A template renders to at most :data:`MAX_RENDERED` characters (1 MiB, more
    than any value a job may hold), so a short template over a long parameter cannot fill the memory.

Every error is an :class:`ExprError`, a :class:`~taskqueues.errors.ValidationError` that carries the
expression, the column (0-based) and the offending name when there is one.

Modules: ``tokens`` (text to tokens), ``parser`` (tokens to a ``tree``, within the length and depth
limits), ``evaluator`` (a tree to a number, units included), ``templates`` (``{name}`` templates) and
``errors``. Only workflows use the language (:mod:`matcher.workflow`).
"""

from .errors import ExprError
from .evaluator import MAX_EXPONENT, MAX_MAGNITUDE, Kind, evaluate, parse_quantity
from .parser import MAX_DEPTH, MAX_LENGTH, MAX_TREE_DEPTH, dep_refs, names, parse
from .templates import MAX_FORMAT_WIDTH, MAX_RENDERED, render, template_dep_refs, template_names
from .tree import BinOp, BoolOp, Call, Compare, Conditional, DepRef, Name, Node, Not, Number, Unary

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "MAX_FORMAT_WIDTH",
    "MAX_LENGTH",
    "MAX_MAGNITUDE",
    "MAX_RENDERED",
    "MAX_TREE_DEPTH",
    "BinOp",
    "BoolOp",
    "Call",
    "Compare",
    "Conditional",
    "DepRef",
    "ExprError",
    "Kind",
    "Name",
    "Node",
    "Not",
    "Number",
    "Unary",
    "dep_refs",
    "evaluate",
    "names",
    "parse",
    "parse_quantity",
    "render",
    "template_dep_refs",
    "template_names",
]
