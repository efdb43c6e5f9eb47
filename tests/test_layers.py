"""The house has layers: taskqueues (the core) imports nothing above it, pilot imports no matcher, only
matcher.app and matcher.cli import pilot, and no module imports itself back through others.

Imports are read from the source (the AST), every one: those inside functions (they run later) and those
under ``if TYPE_CHECKING:`` (a circle of names is a circle to the reader, and to the type checker).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("taskqueues", "matcher", "pilot")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The modules of the three packages that module ``name`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _top(name: str) -> str:
    return name.split(".")[0]


def test_the_core_imports_nothing_above_it() -> None:
    bad = sorted(
        f"{a} -> {b}" for a, deps in GRAPH.items() for b in deps if _top(a) == "taskqueues" and _top(b) != "taskqueues"
    )
    assert not bad, bad


def test_the_pilot_side_imports_no_control_plane() -> None:
    bad = sorted(
        f"{a} -> {b}" for a, deps in GRAPH.items() for b in deps if _top(a) == "pilot" and _top(b) == "matcher"
    )
    assert not bad, bad


def test_only_the_app_and_the_cli_import_pilot() -> None:
    allowed = ("matcher.app", "matcher.cli")
    bad = sorted(
        f"{a} -> {b}"
        for a, deps in GRAPH.items()
        for b in deps
        if _top(a) == "matcher" and _top(b) == "pilot" and not any(a == p or a.startswith(p + ".") for p in allowed)
    )
    assert not bad, bad


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(GRAPH[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return out


def test_no_module_imports_itself_back() -> None:
    assert not _cycles()


def test_the_walk_sees_the_imports() -> None:
    """The checks above would pass on a walk that found nothing: it does find the known edges."""
    assert "taskqueues.store.facade" in GRAPH["taskqueues.store"]
    assert "taskqueues.store.keys" in GRAPH["taskqueues.store.facade"]
    assert "pilot.director.service" in GRAPH["matcher.app.celery_app"]
    assert "taskqueues.context" in GRAPH["pilot.director.command"]


def test_matcher_and_pilot_enter_the_store_by_its_door() -> None:
    """``matcher/`` and ``pilot/`` import ``taskqueues.store`` (the package: ``Store``, its rooms, record types
    and the names of its ``__all__``), never one of its modules."""
    bad = sorted(
        f"{a} -> {b}"
        for a, deps in GRAPH.items()
        for b in deps
        if _top(a) in ("matcher", "pilot") and b.startswith("taskqueues.store.")
    )
    assert not bad, bad


def test_the_door_check_sees_a_submodule_import(tmp_path: Path) -> None:
    """The check above would pass on a walk that missed them: both spellings of a submodule import are seen,
    and a name of the package's face is not taken for a module."""
    path = tmp_path / "x.py"
    path.write_text("from taskqueues.store import keys, Store\nimport taskqueues.store.lock\n")
    found = _imports("matcher.x", path)
    assert {"taskqueues.store.keys", "taskqueues.store.lock", "taskqueues.store"} <= found
    assert not any(name.endswith(".Store") for name in found)


def _raw_client_uses(path: Path) -> list[str]:
    """Where a module reaches for a store's or a context's raw Redis client (``x.client``,
    ``x.connection_pool``)."""
    return [
        f"{path.name}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in ("client", "connection_pool")
    ]


def test_matcher_and_pilot_never_hold_a_raw_client() -> None:
    """Callers talk to Redis through the store's methods and rooms, never through its client."""
    bad = [
        use for name, path in MODULES.items() if _top(name) in ("matcher", "pilot") for use in _raw_client_uses(path)
    ]
    assert not bad, bad


def test_the_raw_client_check_sees_a_use(tmp_path: Path) -> None:
    """The check above would pass on a walk that found nothing: it finds both spellings."""
    sample = tmp_path / "x.py"
    sample.write_text("def f(ctx):\n    ctx.store.client.ping()\n    return ctx.client.connection_pool\n")
    assert len(_raw_client_uses(sample)) == 3


def test_only_the_store_imports_the_redis_client() -> None:
    bad = []
    for name, path in MODULES.items():
        if name == "taskqueues.store" or name.startswith("taskqueues.store."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            bad += [f"{name} -> {m}" for m in modules if m == "redis" or m.startswith("redis.")]
    assert not bad, bad


#: The most lines a product module may have: past it, a room holds more than one concept (CONTRIBUTING.md).
MAX_LINES = 600


def test_no_product_module_is_a_giant() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert not {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert max(sizes.values()) > MAX_LINES / 2  # the walk read the modules
