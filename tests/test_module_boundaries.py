"""Module boundaries in ``src/``, checked on the source's AST.

- Modules talk through public names: no module imports another module's ``_private`` name
  (``from x import _y``), reaches into one (``x._y`` on an imported module of the package), or
  uses a private member its own code does not define (``agent._commit(...)`` in the executor,
  as the executors once reached into 21 private ``Agent`` members).
- No import circle between the modules of ``durable/``.
- Temporal packages depend one way, ``workflows/`` -> ``activities/`` -> ``durable/``: nothing in
  ``activities/`` imports ``workflows/``. Inside ``activities/`` the modules keep an order
  (``contracts`` first: every module that crosses the boundary imports it, it imports none of
  them; then the shared base; then each capability, the model and tool calls importing no other
  capability); inside ``workflows/`` there is no import circle.
- Workflow code calls activities by reference (``execute_activity_method`` and friends), never by
  a name string.
- No module only re-exports what others define (package ``__init__`` files excepted).

Every import counts, also one inside a function or under ``TYPE_CHECKING``: a deferred import
hides a circle from the interpreter, not from the design. The allow-lists name what is still
waiting for the workflow refactor, each with its reason; an entry that no longer matches
anything fails the test, so the lists only shrink.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "durable_agent"

ALLOWED_PRIVATE: dict[tuple[str, str], str] = {}
"""(module, the private name it uses) -> why it may, for now."""

ALLOWED_UPWARD: dict[tuple[str, str], str] = {}
"""(activities module, workflows module it imports) -> why it may, for now."""


@dataclass
class Module:
    name: str
    path: Path
    imports: set[str] = field(default_factory=set)
    """Modules of the package this one imports (a package counts as its ``__init__``)."""
    private_uses: list[tuple[int, str, str]] = field(default_factory=list)
    """(line, private name, the code) for each use of another module's private name."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Module]:
    found = {_module_name(p): Module(_module_name(p), p) for p in (SRC / PACKAGE).rglob("*.py")}
    for module in found.values():
        _scan(module, found)
    return found


def _resolve(module: Module, level: int, target: str | None) -> str:
    """The absolute name a (possibly relative) ``from`` import refers to."""
    if level == 0:
        return target or ""
    base = module.name.split(".")
    if module.path.name != "__init__.py":
        base.pop()  # relative to the containing package
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([target] if target else [])])


def _scan(module: Module, known: dict[str, Module]) -> None:
    tree = ast.parse(module.path.read_text(), str(module.path))
    bound: dict[str, str] = {}
    """Local names bound to modules of the package."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(module, node.level, node.module)
            if source in known:
                module.imports.add(source)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:
                    module.imports.add(submodule)
                    bound[alias.asname or alias.name] = submodule
                if _private(alias.name) and source.startswith(PACKAGE):
                    module.private_uses.append(
                        (node.lineno, alias.name, f"from {source} import {alias.name}")
                    )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    module.imports.add(alias.name)
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name
    defined = _names_defined(tree)
    external = _bound_outside_the_package(tree)
    for node in ast.walk(tree):
        reached = _reached_by_name(node)
        if reached is not None and isinstance(node, ast.Call):
            # getattr(x, "_name"): a private name of whatever x is, a library's above all
            module.private_uses.append((node.lineno, reached, ast.unparse(node)))
            continue
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in bound:
            pass  # a package module's private name
        elif isinstance(root, ast.Name) and (root.id in ("self", "cls") or root.id in external):
            continue  # its own members; a documented library API such as os._exit
        elif node.attr in defined:
            continue  # a private member of a class defined in this module
        module.private_uses.append((node.lineno, node.attr, ast.unparse(node)))


def _reached_by_name(node: ast.AST) -> str | None:
    """The private name ``getattr``, ``hasattr`` or ``setattr`` reaches on anything but the
    calling object itself, if ``node`` is such a call."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return None
    if node.func.id not in ("getattr", "hasattr", "setattr") or len(node.args) < 2:
        return None
    target, name = node.args[0], node.args[1]
    if isinstance(target, ast.Name) and target.id in ("self", "cls"):
        return None
    if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
        return name.value
    return None


def _names_defined(tree: ast.Module) -> set[str]:
    """Every name a module defines: functions, classes, assigned names and attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _bound_outside_the_package(tree: ast.Module) -> set[str]:
    """Local names of modules imported from outside the package (the standard library …)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith(PACKAGE):
                    names.add(alias.asname or alias.name.split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and not (node.module or "").startswith(PACKAGE)
        ):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _cycle_from(start: str, edges: dict[str, set[str]]) -> list[str] | None:
    """An import path from ``start`` back to itself, if there is one."""
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(edges.get(node, ())):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_the_scan_sees_the_package() -> None:
    found = modules()
    assert "durable_agent.durable.agent" in found and "durable_agent.activities.contracts" in found
    agent = found["durable_agent.durable.agent"]
    assert "durable_agent.durable.state" in agent.imports  # relative imports resolved
    assert "durable_agent.session.store" in agent.imports


def test_no_module_uses_another_modules_private_names() -> None:
    used = {
        (m.name, name): f"{m.name} line {line}: {code}"
        for m in modules().values()
        for line, name, code in m.private_uses
    }
    violations = sorted(where for key, where in used.items() if key not in ALLOWED_PRIVATE)
    assert violations == [], "private names used across modules:\n" + "\n".join(violations)
    stale = sorted(set(ALLOWED_PRIVATE) - set(used))
    assert stale == [], f"allow-list entries that match nothing any more: {stale}"


def test_no_import_circle_in_durable() -> None:
    prefix = f"{PACKAGE}.durable."
    edges = {
        m.name: {i for i in m.imports if i.startswith(prefix)}
        for m in modules().values()
        if m.name.startswith(prefix)
    }
    circles = [c for start in sorted(edges) if (c := _cycle_from(start, edges))]
    assert circles == [], "\n".join(" -> ".join(c) for c in circles)


def test_activities_do_not_import_workflows() -> None:
    upward = {
        (m.name, i)
        for m in modules().values()
        if m.name.startswith(f"{PACKAGE}.activities")
        for i in m.imports
        if i.startswith(f"{PACKAGE}.workflows")
    }
    violations = sorted(upward - set(ALLOWED_UPWARD))
    assert violations == [], f"activities/ importing workflows/: {violations}"
    stale = sorted(set(ALLOWED_UPWARD) - upward)
    assert stale == [], f"allow-list entries that match nothing any more: {stale}"
    downward = any(
        i.startswith(f"{PACKAGE}.activities")
        for m in modules().values()
        if m.name.startswith(f"{PACKAGE}.workflows")
        for i in m.imports
    )
    assert downward, "workflows/ is expected to build on activities/"


TEMPORAL_ORDER = [
    ["contracts", "failures", "spec"],
    ["run_contracts"],
    ["base", "start_leaf"],
    ["store_steps"],
    ["stamp_steps"],
    ["model_call", "tool_call", "verb_steps", "reset_steps"],
    [""],
]
"""The modules of ``activities/`` by rank (``""``: the package): a module imports only modules of
a lower rank (and the first rank imports none of the package)."""


def _activities(name: str) -> str:
    return f"{PACKAGE}.activities" + (f".{name}" if name else "")


def test_the_activities_keep_their_order() -> None:
    found = modules()
    rank = {_activities(n): i for i, names in enumerate(TEMPORAL_ORDER) for n in names}
    listed = {m for m in found if m.startswith(f"{PACKAGE}.activities")}
    assert listed == set(rank), f"place these in TEMPORAL_ORDER: {sorted(listed ^ set(rank))}"
    upward = sorted(
        f"{name} imports {i}"
        for name, r in rank.items()
        for i in found[name].imports
        if i in rank and rank[i] >= r and i != name
    )
    assert upward == [], "activities/ modules importing their own rank or above:\n" + "\n".join(
        upward
    )


def test_contracts_are_what_crosses_the_boundary() -> None:
    found = modules()
    contracts = _activities("contracts")
    crossing = [_activities(n) for n in ("model_call", "tool_call", "store_steps", "verb_steps")]
    crossing += [
        f"{PACKAGE}.workflows.{n}"
        for n in ("run_workflow", "verb_workflows", "executor", "run_stream")
    ]
    runs = _activities("run_contracts")
    missing = [m for m in crossing if not {contracts, runs} & set(found[m].imports)]
    assert missing == [], f"modules crossing the boundary without the contracts: {missing}"
    inside = {i for i in found[contracts].imports if i.startswith(f"{PACKAGE}.activities")}
    assert inside == set(), f"contracts import their users: {inside}"
    inside = {i for i in found[runs].imports if i.startswith(f"{PACKAGE}.activities")}
    assert inside == {contracts}, f"run contracts import their users: {inside}"


def test_no_import_circle_in_workflows() -> None:
    prefix = f"{PACKAGE}.workflows."
    edges = {
        m.name: {i for i in m.imports if i.startswith(prefix)}
        for m in modules().values()
        if m.name.startswith(prefix)
    }
    circles = [c for start in sorted(edges) if (c := _cycle_from(start, edges))]
    assert circles == [], "\n".join(" -> ".join(c) for c in circles)


ALLOWED_SHIMS: dict[str, str] = {}
"""Re-export-only modules still waiting for their refactor, each with its reason."""

BY_NAME = {"execute_activity", "execute_local_activity", "start_activity", "start_local_activity"}
"""``workflow`` functions that take an activity by its name string."""


def test_workflow_code_calls_activities_by_reference() -> None:
    by_name = sorted(
        f"{m.name} line {node.lineno}: {ast.unparse(node.func)}"
        for m in modules().values()
        if m.name.startswith((f"{PACKAGE}.workflows", f"{PACKAGE}.activities"))
        for node in ast.walk(ast.parse(m.path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in BY_NAME
    )
    assert by_name == [], "activities called by name:\n" + "\n".join(by_name)


def test_no_module_only_re_exports() -> None:
    """A module whose top level is only imports (and ``__all__``) adds nothing of its own."""

    def defines(tree: ast.Module) -> bool:
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # the docstring
            if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [
                "__all__"
            ]:
                continue
            return True
        return False

    shims = {
        m.name
        for m in modules().values()
        if m.path.name != "__init__.py" and not defines(ast.parse(m.path.read_text()))
    }
    assert sorted(shims - set(ALLOWED_SHIMS)) == [], f"modules that only re-export: {shims}"
    stale = sorted(set(ALLOWED_SHIMS) - shims)
    assert stale == [], f"allow-list entries that match nothing any more: {stale}"


def test_server_sits_between_workflows_and_cli() -> None:
    """``server/`` may import every package but ``cli/``; of the rest only ``cli/`` imports it."""
    found = modules()
    server, cli = f"{PACKAGE}.server", f"{PACKAGE}.cli"
    upward = [
        (m.name, i)
        for m in found.values()
        if m.name.startswith(server)
        for i in m.imports
        if i.startswith(cli)
    ]
    assert upward == [], f"server/ importing cli/: {upward}"
    users = [
        (m.name, i)
        for m in found.values()
        if not m.name.startswith((server, cli))
        for i in m.imports
        if i.startswith(server)
    ]
    assert users == [], f"only cli/ may import server/: {users}"
