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


# vitviz's layers, lowest first (DESIGN §1-2): a module may import its own layer and those below.
VITVIZ_LAYERS: dict[str, int] = {
    # core/: plain utilities; a package ranked as its lowest module, each module at its own rank
    "core": 0,
    **dict.fromkeys(("core.printable", "core.errors", "core.console", "core.tree_text"), 0),
    **dict.fromkeys(("core.devices", "core.finite", "core.layers", "core.model_names"), 0),
    "core.model_ids": 0,  # what text is a hub model id (org/name[@revision])
    **dict.fromkeys(("blocks", "imaging"), 1),
    **dict.fromkeys(("core.filekinds", "core.resources", "core.last_model", "explain"), 2),
    "checkpoints": 3,
    "modelcode": 4,
    # pipeline/: from a model and images to numbers and files, module by module
    "pipeline": 2,
    "pipeline.memory": 2,
    "pipeline.head_stats": 2,  # an analysis's head statistics, made from its attention when read
    "pipeline.kept_graph": 3,  # one image's autograd graph, kept for later targets
    "pipeline.capture": 3,
    "pipeline.analysis": 4,
    # the kinds: the registry low; each kind's package spans the layers, module by module
    "kinds": 1,
    "kindapi": 1,  # the kind contract, torch-free
    **dict.fromkeys(("kinds.swin.network", "kinds.swin.config", "kinds.swin.layers"), 1),
    "kinds.swin.windows": 1,
    "kinds.staged_intermediates": 1,  # the staged kinds' intermediates accessor, written once
    "kinds.class_attention_methods": 2,  # the class-attention layout's methods and statistics
    # the kinds' bases (DESIGN §3): torch-free at import, above what their members call
    **dict.fromkeys(("kinds.table_kind", "kinds.token_layout", "kinds.class_attention"), 5),
    "kinds.staged": 5,
    **dict.fromkeys(("kinds.swin.intermediates", "kinds.pyramid.intermediates"), 2),
    **dict.fromkeys(("kinds.swin.attention", "kinds.swin.rollout", "kinds.swin.gradcam"), 2),
    **dict.fromkeys(("kinds.swin.analysis", "kinds.swin.methods", "kinds.swin.stats"), 2),
    **dict.fromkeys(("kinds.swin.faithfulness", "kinds.swin.export"), 2),
    "kinds.vit.methods": 2,
    # the intermediates accessor of the token-layout kinds: the ViT's, the others' sites on it
    **dict.fromkeys(("kinds.vit.intermediates", "kinds.cait.intermediates"), 2),
    **dict.fromkeys(("kinds.xcit.intermediates", "kinds.clip.intermediates"), 2),
    "kinds.vit.probe_analysis": 5,  # the ViT's Analysis with an attention pool's probe row
    "kinds.swin.families": 3,
    "kinds.swin.modelcode": 4,
    **dict.fromkeys(("kinds.swin", "kinds.swin.output", "kinds.vit"), 5),
    **dict.fromkeys(("kinds.swin.training", "kinds.swin.code_side", "kinds.vit.training"), 5),
    # what the engine asks of a kind, as numpy for the window (no Qt, no workers, no ui)
    **dict.fromkeys(("kinds.swin.engine_data", "kinds.vit.engine_data"), 5),
    # pyramid ViTs (PVT v2): the network low, the families beside the checkpoints
    **dict.fromkeys(("kinds.pyramid.config", "kinds.pyramid.layers", "kinds.pyramid.network"), 1),
    **dict.fromkeys(("kinds.pyramid.hiera_config", "kinds.pyramid.hiera_network"), 1),
    "kinds.pyramid.hiera_words": 1,
    "kinds.pyramid.hiera_plan": 2,
    "kinds.pyramid.reduction": 1,
    **dict.fromkeys(("kinds.pyramid.rollout", "kinds.pyramid.gradcam", "kinds.pyramid.stats"), 2),
    **dict.fromkeys(("kinds.pyramid.analysis", "kinds.pyramid.methods", "kinds.pyramid.export"), 2),
    "kinds.pyramid.families": 3,
    **dict.fromkeys(("kinds.pyramid", "kinds.pyramid.engine_data"), 5),
    # CaiT: its config and network low, its family beside the checkpoints, the kind over the ViT's
    **dict.fromkeys(("kinds.cait.config", "kinds.cait.network"), 1),
    **dict.fromkeys(("kinds.cait.methods", "kinds.cait.stats"), 2),
    "kinds.cait.attribution": 2,  # its LRP relevance, by the rules of explain.attribution
    "kinds.cait.families": 3,
    "kinds.cait": 5,
    **dict.fromkeys(("kinds.xcit.config", "kinds.xcit.network"), 1),
    **dict.fromkeys(("kinds.xcit.attribution", "kinds.xcit.methods"), 2),  # its LRP on CA blocks
    "kinds.xcit.families": 3,
    "kinds.xcit": 5,
    # CLIP: the text side and the network low, its checkpoint family beside the checkpoints
    **dict.fromkeys(("kinds.clip.text", "kinds.clip.tokenizer", "kinds.clip.network"), 1),
    **dict.fromkeys(("kinds.clip.siglip", "kinds.clip.siglip_tokenizer"), 1),
    **dict.fromkeys(
        (
            "kinds.clip.huggingface",
            "kinds.clip.openclip",
            "kinds.clip.siglip_huggingface",
            "kinds.clip.hf_towers",
            "kinds.clip.hf_classifiers",
        ),
        3,
    ),
    "kinds.clip": 5,  # numpy helpers over query maps (the window's fast path shares them)
    **dict.fromkeys(("pipeline.batch", "pipeline.export", "pipeline.folder_stats"), 5),
    "training": 5,
    "cli": 6,
    "workers": 7,
    "ui": 8,
    **dict.fromkeys(("app", "selftest", "qt_deps", "__main__"), 9),
}
VITVIZ_LAYERS = {f"vitviz.{name}": rank for name, rank in VITVIZ_LAYERS.items()}
