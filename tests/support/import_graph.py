"""The project's module graph, read from the source with `ast` (nothing is imported).

Every import statement counts, wherever it is: at the top, inside functions, under
`if TYPE_CHECKING:`. `import a.b.c` is an edge to `a.b.c`; `from a.b import c` is an edge to
`a.b.c` when that is a module, else to `a.b`. Relative imports are resolved against the
importing module. Edges to parent packages (`a/__init__.py` runs before `a.b`) are left out of
the graph, as import-linter does, or every module would sit in a cycle with any package
`__init__` that re-exports its children; closures, which answer "what does importing this run",
follow them (`runtime_edges`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Top-level package name -> folder (kernels/ installs as vla_kernels).
PACKAGES = {
    "vla_server": "vla_server",
    "ros_bridge": "ros_bridge",
    "vla_kernels": "kernels",
    "vla_frames": "vla_frames",
    "vla_harness": "vla_harness",
}


@dataclass
class ModuleGraph:
    files: dict[str, Path] = field(default_factory=dict)
    # module -> every module name it imports (project or not), for closures and rules
    imports: dict[str, set[str]] = field(default_factory=dict)

    def project_edges(self, module: str) -> set[str]:
        return {m for m in self.imports.get(module, ()) if m in self.files}

    def runtime_edges(self, module: str) -> set[str]:
        """What importing `module` runs: its imports, and its parent packages' `__init__`s."""
        parts = module.split(".")
        parents = {".".join(parts[:i]) for i in range(1, len(parts))}
        return self.imports.get(module, set()) | (parents & self.files.keys())

    def closure(self, roots: Iterable[str]) -> set[str]:
        """Every module (external ones too) that importing `roots` may import."""
        seen: set[str] = set()
        todo = list(roots)
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(self.runtime_edges(module))
        return seen

    def path(self, start: str, goal: str) -> list[str]:
        """One shortest chain of `runtime_edges` start -> ... -> goal (empty when none)."""
        return shortest_path(self.runtime_edges, start, goal)


def shortest_path(edges: Callable[[str], Iterable[str]], start: str, goal: str) -> list[str]:
    parents: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier and goal not in parents:
        reached = []
        for module in frontier:
            for dep in sorted(edges(module)):
                if dep not in parents:
                    parents[dep] = module
                    reached.append(dep)
        frontier = reached
    if goal not in parents:
        return []
    chain = [goal]
    while (parent := parents[chain[-1]]) is not None:
        chain.append(parent)
    return chain[::-1]


def module_name(package: str, folder: Path, file: Path) -> str:
    parts = list(file.relative_to(folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def build_graph(root: Path = ROOT) -> ModuleGraph:
    graph = ModuleGraph()
    for package, folder in PACKAGES.items():
        for file in sorted((root / folder).rglob("*.py")):
            graph.files[module_name(package, root / folder, file)] = file
    for module, file in graph.files.items():
        is_package = file.name == "__init__.py"
        tree = ast.parse(file.read_text(), filename=str(file))
        graph.imports[module] = set(_imported(tree, module, is_package, graph.files))
    return graph


def _imported(tree: ast.AST, module: str, is_package: bool, known: dict) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, module, is_package)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield candidate if candidate in known else base


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    # A package's own module is its __init__, so `from . import x` stays inside it.
    anchor = module.split(".")
    drop = node.level - 1 if is_package else node.level
    base = anchor[: len(anchor) - drop]
    return ".".join([*base, *([node.module] if node.module else [])])


def find_cycles(graph: ModuleGraph, modules: Iterable[str]) -> list[str]:
    """Each group of `modules` that import each other (directly or not), as one of its cycles
    'a -> b -> a' and, when the group is larger than that cycle, the group's other members."""
    found = []
    for group in _strong_components(graph, set(modules)):
        cycle = _cycle_in(graph, group)
        rest = sorted(group - set(cycle))
        knot = f" (also in this knot: {', '.join(rest)})" if rest else ""
        found.append(" -> ".join(cycle) + knot)
    return found


def _strong_components(graph: ModuleGraph, scope: set[str]) -> list[set[str]]:
    """Groups of modules that import each other, directly or not (Kosaraju)."""
    order: list[str] = []
    seen: set[str] = set()
    for start in sorted(scope):
        _postorder(start, lambda m: graph.project_edges(m) & scope, seen, order)
    reverse: dict[str, set[str]] = {m: set() for m in scope}
    for module in scope:
        for dep in graph.project_edges(module) & scope:
            reverse[dep].add(module)
    groups, assigned = [], set()
    for start in reversed(order):
        group: list[str] = []
        _postorder(start, lambda m: reverse[m], assigned, group)
        if len(group) > 1 or (group and group[0] in graph.project_edges(group[0])):
            groups.append(set(group))
    return groups


def _postorder(start: str, edges, seen: set[str], out: list[str]) -> None:
    if start in seen:
        return
    seen.add(start)
    stack = [(start, iter(sorted(edges(start))))]
    while stack:
        module, deps = stack[-1]
        dep = next((d for d in deps if d not in seen), None)
        if dep is None:
            stack.pop()
            out.append(module)
        else:
            seen.add(dep)
            stack.append((dep, iter(sorted(edges(dep)))))


def _cycle_in(graph: ModuleGraph, group: set[str]) -> list[str]:
    """A shortest way from the group's first module back to itself."""
    start = min(group)

    def edges(module: str) -> set[str]:
        return graph.project_edges(module) & group

    if start in edges(start):
        return [start, start]
    ways = [shortest_path(edges, dep, start) for dep in sorted(edges(start))]
    return [start, *min((w for w in ways if w), key=len)]


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")
