"""How vitviz's source is laid out, counted: the numbers the model-kind redesign is judged by.

Prints one table, then the findings behind its rows. Nothing is timed or run; exit 0 always.

- import circles and upward imports between modules, and between top-level packages (core,
  imaging, model, kinds, ..., each entry module on its own): a module's import of another
  package is that package pair's edge. A package's rank is its top-level name's line in
  ``tests/import_graph.py``'s ``VITVIZ_LAYERS``; a package without one takes the lowest rank of
  its modules (said under the table). A package pair counts once however many imports make it.
- rank lines in ``VITVIZ_LAYERS`` and how many name something below a top-level package.
- lines naming an architecture (Swin, CaiT, XCiT, Hiera, PVT, Twins, CLIP, SigLIP, EVA, BEiT) as
  code outside its own kind package: identifier tokens only (``tokenize``: comments, docstrings
  and strings are never read), an architecture's name standing as a word of the identifier
  (``SwinKind``, ``is_swin``, ``kinds.swin`` yes; ``abswin``, ``evaluate``, ``relevance`` no;
  ``openclip`` yes). The verb clip is no CLIP: ``x.clip(...)`` calls and torch's, Qt's and the
  training settings' clip names (``CLIP_VERB``). Own package: ``kinds/<k>/`` with swin→swin,
  cait→cait, xcit→xcit, pvt/twins/hiera→pyramid, clip/siglip→clip, eva/beit→vit; EVA and BEiT
  are ViT families, so ``checkpoints/families/`` (the ViT's families, wherever the other kinds
  keep theirs in their own package) is theirs too. A line naming two architectures counts once.
- ``kind_of(...)`` calls (``ast.Call``, not the definition) and the files holding them.
- members of the kind protocol: class ``ModelKind`` found by name anywhere in the package, with
  the classes of the package it inherits from (``Protocol``/``Generic`` aside), each member
  name once (methods, properties, annotated and assigned attributes).
- the toy kind of ``tests/kindapi/test_toy_kind.py``: its top-level classes named ``*Kind`` and the
  top-level definitions only they use (a definition joins when every top-level statement that
  names it has joined, repeated until nothing changes); their non-blank, non-comment lines,
  decorators and docstrings included.
- uses of ``Any`` (as text, as before).
- repeated-block pairs swin↔pyramid and cait↔xcit: pairs of files, one in each folder, sharing a
  run of 6 or more identical lines once white space is folded and blank, comment, import and
  lone-punctuation lines are dropped (counted here, no dependency); and, when the
  ``duplicates`` command is on PATH, its pairs between the two folders (identical or same-shape
  runs of 6 lines).

    .venv/bin/python benchmarks/structure.py [--package vitviz] [--repo DIR]

``--repo`` measures another checkout (its ``tests/import_graph.py`` gives the ranks).
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from _common import REPO_ROOT, parser, print_table

# A line that asks which kind it holds: is_swin, isinstance(.., Swin..), a swin_ module or name.
KIND_BRANCH = re.compile(r"\bis_swin\b|isinstance\([^)]*Swin|\bswin_\w+")
ANY = re.compile(r"\bAny\b")
# The modules that stay at the top of the package: its __init__, ``python -m vitviz``, the
# window's entry point (gui-script), the installed self-test and the Qt-dependency check (run
# as ``python -m vitviz.qt_deps`` by packaging/install.sh). Anything else belongs in a package.
ENTRY_POINTS = ("__init__", "__main__", "app", "selftest", "qt_deps")

# architecture -> its own kind package(s), as paths below the package folder
ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "Swin": ("kinds/swin",),
    "CaiT": ("kinds/cait",),
    "XCiT": ("kinds/xcit",),
    "Hiera": ("kinds/pyramid",),
    "PVT": ("kinds/pyramid",),
    "Twins": ("kinds/pyramid",),
    "CLIP": ("kinds/clip",),
    "SigLIP": ("kinds/clip",),
    "EVA": ("kinds/vit", "checkpoints/families"),
    "BEiT": ("kinds/vit", "checkpoints/families"),
}
# Words glued in front of an architecture's name in lower case that still name it (OpenCLIP).
JOINED_PREFIXES = ("open",)
# The verb clip: torch's gradient clipping, the training setting, Qt's clip rectangles.
CLIP_VERB = frozenset(
    {
        "clip_grad_norm_",
        "clip_grad_value_",
        "grad_clip",
        "setClipRect",
        "setClipRegion",
        "setClipPath",
        "setClipping",
        "IntersectClip",
        "ReplaceClip",
        "NoClip",
        "ClipOperation",
    }
)
TOY_KIND = Path("tests/kindapi/test_toy_kind.py")
REPEAT_PAIRS = (("swin", "pyramid"), ("cait", "xcit"))
MIN_RUN = 6


# -- packages ----------------------------------------------------------------------------------
def package_of(module: str, top: str) -> str:
    """``vitviz.kinds.swin.network`` -> ``vitviz.kinds``; ``vitviz.app`` stays; ``vitviz`` too."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == top and len(parts) > 1 else module


def package_graph(graph: Mapping[str, Mapping[str, int]], top: str) -> dict[str, dict[str, int]]:
    """package -> {imported package: the number of module imports behind that edge}."""
    out: dict[str, dict[str, int]] = {}
    for module, edges in graph.items():
        mine = package_of(module, top)
        row = out.setdefault(mine, {})
        for target in edges:
            theirs = package_of(target, top)
            if theirs != mine:
                row[theirs] = row.get(theirs, 0) + 1
    return out


def package_ranks(
    graph: Mapping[str, Mapping[str, int]], layers: Mapping[str, int], top: str, layer_of
) -> tuple[dict[str, int], list[str]]:
    """Each package's rank (its own line, else its modules' lowest) and those taken that way."""
    ranks: dict[str, int] = {}
    derived: list[str] = []
    packages = sorted({package_of(m, top) for m in graph})
    for package in packages:
        if package in layers:
            ranks[package] = layers[package]
            continue
        own = [layer_of(m, layers) for m in graph if package_of(m, top) == package]
        known = [r for r in own if r is not None]
        if known:
            ranks[package] = min(known)
            derived.append(package)
    return ranks, derived


def upward_packages(
    pgraph: Mapping[str, Mapping[str, int]], ranks: Mapping[str, int]
) -> list[tuple[str, str, int]]:
    """(importer, imported, module imports) for each package pair pointing up the ranks."""
    found = []
    for package, edges in pgraph.items():
        for target, n in edges.items():
            if package in ranks and target in ranks and ranks[target] > ranks[package]:
                found.append((package, target, n))
    return sorted(found)


# -- architecture names ------------------------------------------------------------------------
def _boundary_before(ident: str, i: int) -> bool:
    if i == 0 or not ident[i - 1].isalpha():
        return True
    if ident[i - 1].islower() and ident[i].isupper():
        return True
    return ident[:i].lower().endswith(JOINED_PREFIXES)


def _boundary_after(ident: str, j: int) -> bool:
    return j == len(ident) or not ident[j].isalpha() or ident[j].isupper()


def architectures_named(ident: str) -> set[str]:
    """The architectures an identifier names as one of its words (case-insensitive)."""
    found = set()
    lower = ident.lower()
    for arch in ARCHITECTURES:
        key = arch.lower()
        start = lower.find(key)
        while start >= 0:
            end = start + len(key)
            if _boundary_before(ident, start) and _boundary_after(ident, end):
                found.add(arch)
                break
            start = lower.find(key, start + 1)
    return found


def own_architectures(relative: Path) -> set[str]:
    """The architectures whose own package holds this file (path below the package folder)."""
    text = relative.as_posix()
    return {a for a, homes in ARCHITECTURES.items() if any(text.startswith(h + "/") for h in homes)}


def foreign_name_lines(source: str, own: set[str]) -> dict[int, set[str]]:
    """line -> architectures other than ``own`` named there by an identifier token."""
    lines: dict[int, set[str]] = {}
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for k, tok in enumerate(tokens):
        if tok.type != tokenize.NAME:
            continue
        named = architectures_named(tok.string) - own
        if "CLIP" in named:
            before = tokens[k - 1].string if k else ""
            after = tokens[k + 1].string if k + 1 < len(tokens) else ""
            if tok.string in CLIP_VERB or (
                tok.string.lower() == "clip" and before == "." and after == "("
            ):
                named.discard("CLIP")
        if named:
            lines.setdefault(tok.start[0], set()).update(named)
    return lines


# -- kind_of, the protocol -----------------------------------------------------------------------
def kind_of_calls(tree: ast.AST) -> int:
    """Calls of ``kind_of(...)`` / ``x.kind_of(...)`` in a module."""
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "kind_of")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "kind_of")
        )
    )


def _class_members(node: ast.ClassDef) -> set[str]:
    names = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.Assign):
            names.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return names


def protocol_members(trees: Iterable[ast.AST], name: str = "ModelKind") -> tuple[int, list[str]]:
    """(member names of class ``name`` and the package's classes it inherits, the classes)."""
    classes: dict[str, ast.ClassDef] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)
    if name not in classes:
        return 0, []
    members: set[str] = set()
    seen: list[str] = []
    todo = [name]
    while todo:
        cls = todo.pop()
        if cls in seen or cls not in classes:
            continue
        seen.append(cls)
        members |= _class_members(classes[cls])
        for base in classes[cls].bases:
            base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
            if base_name not in ("Protocol", "Generic"):
                todo.append(base_name)
    return len(members), seen


# -- the toy kind ------------------------------------------------------------------------------
def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def toy_kind_lines(source: str) -> tuple[int, list[str]]:
    """(code lines of the ``*Kind`` classes and what only they use, the definitions counted)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    stmts = [s for s in tree.body if not isinstance(s, ast.Import | ast.ImportFrom)]
    defined = [_defined(s) for s in stmts]
    used = [
        {n.id for n in ast.walk(s) if isinstance(n, ast.Name)} - d
        for s, d in zip(stmts, defined, strict=True)
    ]
    chosen = {
        i for i, s in enumerate(stmts) if isinstance(s, ast.ClassDef) and s.name.endswith("Kind")
    }
    while True:
        grown = set(chosen)
        for i, names in enumerate(defined):
            if i in chosen or not names:
                continue
            users = {j for j, u in enumerate(used) if u & names}
            if users and users <= chosen:
                grown.add(i)
        if grown == chosen:
            break
        chosen = grown
    count = 0
    for i in chosen:
        s = stmts[i]
        first = min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", []))])
        for text in lines[first - 1 : s.end_lineno]:
            stripped = text.strip()
            if stripped and not stripped.startswith("#"):
                count += 1
    return count, sorted(n for i in chosen for n in defined[i])


# -- repeated blocks ---------------------------------------------------------------------------
def _normalised(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        s = " ".join(line.split())
        if not s or s.startswith("#") or s.startswith(("import ", "from ")):
            continue
        if not any(c.isalnum() for c in s):
            continue
        out.append(s)
    return out


def repeated_pairs(left: Path, right: Path, run: int = MIN_RUN) -> int:
    """Pairs of files (one under each folder) sharing ``run`` identical normalised lines."""

    def windows(path: Path) -> set[tuple[str, ...]]:
        lines = _normalised(path.read_text(encoding="utf-8"))
        return {tuple(lines[i : i + run]) for i in range(len(lines) - run + 1)}

    a = [windows(p) for p in sorted(left.rglob("*.py")) if "__pycache__" not in p.parts]
    b = [windows(p) for p in sorted(right.rglob("*.py")) if "__pycache__" not in p.parts]
    return sum(1 for x in a for y in b if x & y)


def duplicates_pairs(left: Path, right: Path) -> int | None:
    """The ``duplicates`` command's pairs between the two folders (None: no such command)."""
    if shutil.which("duplicates") is None or not left.is_dir() or not right.is_dir():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        for folder in (left, right):
            shutil.copytree(
                folder, Path(tmp) / folder.name, ignore=shutil.ignore_patterns("__pycache__")
            )
        proc = subprocess.run(
            ["duplicates", "--repo", tmp, "--most", "200", "--min-lines", str(MIN_RUN)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    row = re.compile(r"^D\d+ (\S+?):\d+-\d+ ~ (\S+?):\d+-\d+")
    count = 0
    for line in proc.stdout.splitlines():
        m = row.match(line)
        if m and {m[1].split("/")[0], m[2].split("/")[0]} == {left.name, right.name}:
            count += 1
    return count


# -- the table ---------------------------------------------------------------------------------
@dataclass
class Layout:
    """Everything counted, with the findings behind the counts."""

    rows: list[tuple[str, int]]
    notes: list[str]


def measure(repo: Path, package: Path, layers: Mapping[str, int], ig) -> Layout:
    """Count ``package`` (a folder of ``repo``); ``ig`` is the import_graph module to use."""
    top = package.name
    files = [f for f in sorted(package.rglob("*.py")) if "__pycache__" not in f.parts]
    graph = ig.import_graph(package)
    found_circles = ig.circles(graph)
    upward = ig.upward_imports(graph, layers)
    pgraph = package_graph(graph, top)
    ranks, derived = package_ranks(graph, layers, top, ig.layer_of)
    package_circles = ig.circles(pgraph)
    package_upward = upward_packages(pgraph, ranks)
    deep_lines = [k for k in layers if k.count(".") > 1]

    own_swin = set(package.rglob("swin_*.py")) | set((package / "kinds").rglob("*.py"))
    branch_lines: dict[Path, int] = {}
    foreign: dict[Path, dict[int, set[str]]] = {}
    calls: dict[Path, int] = {}
    trees = []
    any_uses = 0
    for f in files:
        text = f.read_text(encoding="utf-8")
        any_uses += len(ANY.findall(text))
        if f not in own_swin:
            hits = sum(1 for line in text.splitlines() if KIND_BRANCH.search(line))
            if hits:
                branch_lines[f] = hits
        named = foreign_name_lines(text, own_architectures(f.relative_to(package)))
        if named:
            foreign[f] = named
        tree = ast.parse(text, filename=str(f))
        trees.append(tree)
        n = kind_of_calls(tree)
        if n:
            calls[f] = n
    members, protocol_classes = protocol_members(trees)
    toy = repo / TOY_KIND
    toy_lines, toy_names = (
        toy_kind_lines(toy.read_text(encoding="utf-8")) if toy.exists() else (0, [])
    )
    loose = [f for f in package.glob("*.py") if f.stem not in ENTRY_POINTS]

    per_arch = {
        a: sum(1 for lines in foreign.values() for s in lines.values() if a in s)
        for a in ARCHITECTURES
    }
    rows = [
        ("import circles", len(found_circles)),
        ("upward imports", len(upward)),
        ("import circles between packages", len(package_circles)),
        ("upward package pairs", len(package_upward)),
        ("  ... module imports behind them", sum(n for *_, n in package_upward)),
        ("rank lines in VITVIZ_LAYERS", len(layers)),
        ("  ... naming below a top-level package", len(deep_lines)),
        ("lines naming an architecture outside its kind", sum(len(v) for v in foreign.values())),
        ("  ... modules holding them", len(foreign)),
        *((f"  ... naming {a}", n) for a, n in per_arch.items()),
        ("kind_of( calls", sum(calls.values())),
        ("  ... modules calling kind_of", len(calls)),
        ("kind protocol members", members),
        ("toy kind lines", toy_lines),
        ("lines naming the Swin kind outside its own modules", sum(branch_lines.values())),
        ("  ... modules holding the Swin kind lines", len(branch_lines)),
        ("swin_* modules", len(list(package.rglob("swin_*.py")))),
        ("loose top-level modules", len(loose)),
        ("uses of Any", any_uses),
        ("modules", len(graph)),
        ("packages", len(pgraph)),
    ]
    for left, right in REPEAT_PAIRS:
        a, b = package / "kinds" / left, package / "kinds" / right
        rows.append((f"repeated-block pairs {left}-{right}", repeated_pairs(a, b)))
        tool = duplicates_pairs(a, b)
        if tool is not None:
            rows.append((f"  ... by the duplicates command {left}-{right}", tool))

    notes = [f"rank of {p}: {ranks[p]}, its modules' lowest (no line of its own)" for p in derived]
    notes += [f"protocol: {' + '.join(protocol_classes) or 'no class ModelKind found'}"]
    notes += [f"toy kind: {', '.join(toy_names) or 'no ' + str(TOY_KIND)}"]
    notes += ["package circle: " + " <-> ".join(c) for c in package_circles]
    notes += [
        f"upward package pair: {a} -> {b} ({n} imports, ranks {ranks[a]} -> {ranks[b]})"
        for a, b, n in package_upward
    ]
    notes += ["circle: " + " <-> ".join(c) for c in found_circles]
    notes += [f"upward: {m}:{line} imports {t}" for m, line, t in upward]
    notes += [f"loose: {f.relative_to(repo)}" for f in sorted(loose)]
    for f, lines in sorted(foreign.items(), key=lambda kv: -len(kv[1]))[:15]:
        named = sorted(set().union(*lines.values()))
        notes.append(f"architecture names: {f.relative_to(repo)} {len(lines)} ({', '.join(named)})")
    for f, n in sorted(calls.items(), key=lambda kv: -kv[1])[:10]:
        notes.append(f"kind_of: {f.relative_to(repo)} {n}")
    top_branches = sorted(branch_lines.items(), key=lambda kv: -kv[1])[:10]
    notes += [f"kind branches: {f.relative_to(repo)} {n}" for f, n in top_branches]
    return Layout(rows, notes)


def main() -> int:
    p = parser(__doc__.splitlines()[0])  # --quick etc. are accepted and change nothing here
    p.add_argument("--package", default="vitviz", help="the package folder under the repository")
    p.add_argument("--repo", type=Path, default=REPO_ROOT, help="the checkout to measure")
    args = p.parse_args()
    repo = args.repo.resolve()
    sys.path.insert(0, str(repo / "tests"))
    import import_graph as ig

    layout = measure(repo, repo / args.package, ig.VITVIZ_LAYERS, ig)
    print_table(["count", "value"], [(name, str(value)) for name, value in layout.rows])
    for note in layout.notes:
        print(note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
