"""The design the code cites is in the repository: "DESIGN §n" names a docs/DESIGN.md section."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"DESIGN\W{0,4}§\s?(\d+)(?:\.(\d+))?")


def design_sections() -> dict[int, int]:
    """Section number -> how many numbered items it has (0: none), read from docs/DESIGN.md."""
    sections: dict[int, int] = {}
    current = None
    for line in (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## (\d+)\. ", line)
        if heading:
            current = int(heading.group(1))
            sections[current] = 0
        elif current is not None and re.match(r"\d+\. ", line):
            sections[current] += 1
    return sections


def citations() -> list[tuple[str, int, int | None]]:
    found = []
    for folder in ("vitviz", "tests", "benchmarks", "packaging"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for match in CITATION.finditer(path.read_text(encoding="utf-8")):
                item = int(match.group(2)) if match.group(2) else None
                found.append((str(path.relative_to(ROOT)), int(match.group(1)), item))
    return found


def test_every_design_citation_names_a_section_that_exists() -> None:
    sections = design_sections()
    cited = citations()
    assert len(cited) > 20  # the code does cite it
    missing = [
        (path, section, item)
        for path, section, item in cited
        if section not in sections or (item is not None and item > sections[section])
    ]
    assert not missing, f"citations of sections docs/DESIGN.md lacks: {missing}"


ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? #?\d+")


def test_no_code_comment_cites_an_issue_number() -> None:
    """The code cites the design document; an issue number means nothing to a reader of a clone."""
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("vitviz", "tests", "benchmarks", "packaging")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ISSUE_NUMBER.search(line)
    ]
    assert not found, f"issue numbers cited in code: {found}"
