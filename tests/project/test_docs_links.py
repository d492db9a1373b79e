"""The README is a short front page; the rest is in docs/. Every document there is linked from
the front page, and the links between them land: a linked picture or file exists, and a link to a
section (``file.md#anchor``) names a heading of that file (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def links(path: Path) -> list[tuple[str, str]]:
    """(target file, anchor) of each relative link in ``path``."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    found = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        found.append((file, anchor))
    return found


def test_the_front_page_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert first_block == [
        "bash packaging/install.sh && .venv/bin/vitviz",
        "bash packaging/install.sh --test && "
        "QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest -q -n 2",
    ]
    head = "\n".join(text.splitlines()[:30])
    assert "--cpu" in head and "--families" in head
    assert "![the vitviz window](resources/screenshot.png)" in text


def test_every_document_is_linked_from_the_front_page() -> None:
    linked = {file for file, _ in links(README)}
    assert DOCS
    for doc in DOCS:
        assert f"docs/{doc.name}" in linked, doc.name


def test_links_land_on_files_and_headings_that_exist() -> None:
    for page in [README, *DOCS]:
        for file, anchor in links(page):
            target = (page.parent / file).resolve() if file else page
            assert target.is_file(), f"{page.name}: {file}"
            if anchor:
                assert anchor in anchors(target), f"{page.name}: {file}#{anchor}"
