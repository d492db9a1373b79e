"""benchmarks/structure.py's counts on a small made-up package: package-level upward imports and
circles, architecture names read as code only, ``kind_of`` calls, protocol members, the toy kind."""

from __future__ import annotations

import sys
from pathlib import Path

import import_graph as ig
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import structure

FILES = {
    "__init__.py": "",
    "low/__init__.py": "",
    "low/a.py": "from fake.high import b\n",  # low (0) -> high (1): up at package level
    "high/__init__.py": "",
    "high/b.py": "import fake.low.c\n",
    "low/c.py": "x = 1\n",
    "kinds/__init__.py": "def kind_of(m):\n    return m\n",
    "kinds/protocol.py": (
        "from typing import Protocol\n"
        "class Base(Protocol):\n    name: str\n    def owns(self): ...\n"
        "class ModelKind(Base, Protocol):\n    label: str\n    def owns(self): ...\n"
        "    def parts(self): ...\n"
    ),
    "kinds/swin/__init__.py": "SwinKind = 1\n",
    "kinds/pyramid/__init__.py": "",
    "user.py": (
        "from fake.kinds import kind_of\n"
        "# SwinKind in a comment\n"
        'NOTE = "a Swin in a string"\n'
        "import numpy as np\n"
        "y = np.clip(1, 0, 2)\n"
        "def f(swin_model, abswin):\n"
        "    return kind_of(swin_model), kind_of(abswin)\n"
    ),
}


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    package = tmp_path / "fake"
    for name, text in FILES.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_an_upward_import_between_packages_is_found(fake: Path) -> None:
    # each module is ranked at its own package's line except low.a, ranked up with high: at
    # module level nothing points up, at package level low -> high does
    layers = {"fake.low": 0, "fake.low.a": 1, "fake.high": 1, "fake.kinds": 0, "fake.user": 2}
    layout = structure.measure(fake.parent, fake, layers, ig)
    rows = dict(layout.rows)
    assert rows["upward imports"] == 0
    assert rows["upward package pairs"] == 1  # two module edges: fake.high and fake.high.b
    assert "fake.low -> fake.high (2 imports, ranks 0 -> 1)" in "\n".join(layout.notes)
    assert rows["import circles between packages"] == 1  # low -> high -> low
    assert rows["import circles"] == 0
    assert rows["rank lines in VITVIZ_LAYERS"] == 5
    assert rows["  ... naming below a top-level package"] == 1


def test_a_package_without_its_line_takes_its_lowest_module(fake: Path) -> None:
    layers = {"fake.low.a": 3, "fake.low.c": 2, "fake.high": 1}
    layout = structure.measure(fake.parent, fake, layers, ig)
    assert "rank of fake.low: 2, its modules' lowest (no line of its own)" in layout.notes
    rows = dict(layout.rows)
    assert rows["upward package pairs"] == 1  # high (1) -> low (2); low -> high points down
    assert "upward package pair: fake.high -> fake.low (1 imports, ranks 1 -> 2)" in layout.notes


def test_architecture_names_count_as_code_only(fake: Path) -> None:
    rows = dict(structure.measure(fake.parent, fake, {}, ig).rows)
    # user.py line 6 (the def's swin_model) and 7: the comment, string, np.clip, abswin do not
    assert rows["lines naming an architecture outside its kind"] == 2
    assert rows["  ... naming Swin"] == 2 and rows["  ... naming CLIP"] == 0
    assert rows["kind_of( calls"] == 2 and rows["  ... modules calling kind_of"] == 1
    assert rows["kind protocol members"] == 4  # name, owns, label, parts


def test_words_of_an_identifier() -> None:
    named = structure.architectures_named
    assert named("SwinKind") == {"Swin"} and named("is_swin") == {"Swin"}
    assert named("CaiTBlock") == {"CaiT"} and named("open_clip") == {"CLIP"}
    assert named("openclip") == {"CLIP"} and named("SIGLIP_PROCESSOR") == {"SigLIP"}
    assert not named("abswin") and not named("evaluate") and not named("relevance")
    assert not named("clipboard") and not named("hierarchy")


def test_the_toy_kind_is_its_class_and_what_only_it_uses() -> None:
    source = (
        "SHARED = 1\n"
        "def helper():\n"
        "    # a comment\n"
        "\n"
        "    return SHARED\n"
        "class ToyKind:\n"
        "    def run(self):\n"
        "        return helper()\n"
        "def test_it():\n"
        "    assert SHARED\n"
    )
    lines, names = structure.toy_kind_lines(source)
    assert names == ["ToyKind", "helper"]  # SHARED is the test's too
    assert lines == 5


def test_repeated_blocks_need_six_identical_lines(tmp_path: Path) -> None:
    body = "".join(f"x{i} = compute({i})\n" for i in range(6))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "one.py").write_text("import os\n" + body)
    (tmp_path / "b" / "two.py").write_text("# other\n\n" + body.replace("    ", " "))
    (tmp_path / "b" / "three.py").write_text(body[: body.rindex("x5")])  # five lines only
    assert structure.repeated_pairs(tmp_path / "a", tmp_path / "b") == 1
