"""The import graph of a package, read from its source: edges, circles and upward imports.

Used by the structure test (imports only point down the layers, DESIGN §2.7) and by
``benchmarks/structure.py``. Every ``import`` / ``from ... import`` statement counts, at module
level, inside a function (a lazy import is still a dependency) or under ``if TYPE_CHECKING:``
(a type named from a higher layer ties the lower one to it all the same).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    """``root/pkg/a/b.py`` -> ``pkg.a.b``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(tree: ast.AST, this: str, is_package: bool) -> Iterable[tuple[str, int]]:
    """(imported name, line) for every import statement, names made absolute."""
    package = this if is_package else this.rpartition(".")[0]
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            yield name, node.lineno
            for alias in node.names:  # from pkg import submodule
                yield f"{name}.{alias.name}", node.lineno
        stack.extend(ast.iter_child_nodes(node))


def import_graph(package_dir: Path) -> dict[str, dict[str, int]]:
    """module -> {imported module of the same package: first line}, for every .py below."""
    root = package_dir.parent
    top = package_dir.name
    files = [p for p in sorted(package_dir.rglob("*.py")) if "__pycache__" not in p.parts]
    modules = {module_name(p, root): p for p in files}
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: dict[str, int] = {}
        for target, line in _imports(tree, name, path.name == "__init__.py"):
            if target.split(".")[0] != top:
                continue
            while target and target not in modules:  # pkg.mod.func -> pkg.mod
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def circles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, {}))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def layer_of(module: str, layers: Mapping[str, int]) -> int | None:
    """The rank of the longest prefix of ``module`` named in ``layers`` (None: unranked)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        rank = layers.get(".".join(parts[:n]))
        if rank is not None:
            return rank
    return None


def upward_imports(
    graph: Mapping[str, Mapping[str, int]], layers: Mapping[str, int]
) -> list[tuple[str, int, str]]:
    """(importer, line, imported) where the imported module sits in a higher layer."""
    found = []
    for module, edges in graph.items():
        mine = layer_of(module, layers)
        for target, line in edges.items():
            theirs = layer_of(target, layers)
            if mine is not None and theirs is not None and theirs > mine:
                found.append((module, line, target))
    return sorted(found)


# vitviz's layers, lowest first (DESIGN §2): one line per top-level package. A module may import
# its own package and those below it; the kind packages (kinds/) are plug-ins on top of the
# shared layers, which reach them only through the registry (kindapi).
VITVIZ_LAYERS: dict[str, int] = {
    "core": 0,  # plain utilities, the image formats
    "imaging": 1,  # decoding, preprocessing, overlays
    "blocks": 1,  # the transformer blocks several kinds build on (pure torch)
    "kindapi": 2,  # the kind contract and registry, torch-free
    "explain": 3,  # the methods' definitions and the method table
    "checkpoints": 4,  # reading, families' toolkit, the library check
    "modelcode": 5,  # a model from a user's own code
    "pipeline": 6,  # analyze through the kind, batches, export, statistics over folders
    "kinds": 7,  # the kind packages: vit, swin, pyramid, cait, xcit, clip
    "training": 8,
    "cluster": 8,  # running a command's per-image work on an engine (Ray), torch-free
    "cli": 9,
    "workers": 10,
    "ui": 11,
    **dict.fromkeys(("app", "selftest", "qt_deps", "__main__"), 12),  # entry points
}
VITVIZ_LAYERS = {f"vitviz.{name}": rank for name, rank in VITVIZ_LAYERS.items()}
