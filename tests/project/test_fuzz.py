"""The fuzz suite: seeded hostile images and checkpoints (tests/hostile_files.py), each through
vitviz's Python API and CLI. Every case must end accepted (a valid control) or in vitviz's own
one-line error, the CLI exiting 2 (1 when part of a batch failed) with only ``vitviz-cli:`` lines;
never a raw exception, a hang (30 s per case), more than 1.5 GB of peak memory, another program
started or a file written (see tests/fuzz_harness.py for how each is seen). The longer run of
the same generators is benchmarks/fuzz.py.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_harness import FuzzEnv, run_case, warm_up
from hostile_files import Case, ci_cases

CASES = ci_cases(seed=0)
CASE_TIMEOUT_S = 30
# Images that also go through `explain` beside a valid image (exit 1): the first of each group.
BATCH = {next(c.name for c in CASES if c.group == g) for g in {c.group for c in CASES}}


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzEnv]:
    env = FuzzEnv.create(tmp_path_factory.mktemp("fuzz-env"))
    with env.activated():
        warm_up(env, tmp_path_factory.mktemp("fuzz-warm-up"))
        yield env


def test_the_subset_covers_every_generator() -> None:
    from hostile_files import generators

    groups = {c.group for c in CASES}
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), "case names must be unique"
    made = {g.__name__ for g in generators()}
    assert len(made) >= 20
    assert {"image", "checkpoint"} == {c.kind for c in CASES}
    assert {"accepted", "refused", "either"} == {c.expect for c in CASES}
    for group in ("pickle", "postscript", "bomb", "special", "names", "sidecar", "native-lies"):
        assert group in groups
    assert 100 <= len(CASES) <= 260, len(CASES)


@pytest.mark.timeout(CASE_TIMEOUT_S)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_ends_cleanly(case: Case, fuzz_env: FuzzEnv, tmp_path: Path) -> None:
    outcome = run_case(case, tmp_path, fuzz_env, batch=case.name in BATCH)
    assert outcome.clean, f"{case.name} (expect {case.expect}, {outcome.verdict}):\n" + "\n".join(
        outcome.problems
    )


# -- the harness sees what it must see: each check fails when vitviz misbehaves -------------------


def _case(name: str) -> Case:
    from hostile_files import all_cases

    return next(c for c in all_cases(0) if c.name == name)


def test_harness_sees_ghostscript_started(
    fuzz_env: FuzzEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without vitviz's format allowlist, Pillow hands a PostScript '.png' to Ghostscript."""
    from PIL import Image

    import vitviz
    import vitviz.kinds.vit.analysis

    def naive(source: object, **_: object) -> Image.Image:
        with Image.open(source) as image:  # every format Pillow knows, EPS included
            return image.convert("RGB")

    monkeypatch.setattr(vitviz, "load_image", naive)
    monkeypatch.setattr(vitviz.kinds.vit.analysis, "load_image", naive)
    outcome = run_case(_case("postscript/eps-writes-a-file.png"), tmp_path, fuzz_env, cli=False)
    assert "program" in outcome.categories(), outcome.problems
    assert any("ghostscript-started" in p for p in outcome.problems), outcome.problems


def test_harness_sees_code_run_by_a_pickle(
    fuzz_env: FuzzEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loader that unpickles freely runs the payload: the call and its marker file are seen."""
    import torch

    import vitviz.checkpoints

    def unsafe(path: object, config: object = None) -> object:
        return torch.load(path, weights_only=False)  # what vitviz must never do

    monkeypatch.setattr(vitviz.checkpoints, "load_checkpoint", unsafe)
    outcome = run_case(_case("pickle/os-system-p2-torch-zip.bin"), tmp_path, fuzz_env, cli=False)
    assert {"program", "file", "raw"} <= outcome.categories(), outcome.problems
    assert any("os.system" in p for p in outcome.problems)
    assert any("PWNED-os-system" in p for p in outcome.problems)


def test_harness_sees_raw_errors_bad_messages_writes_and_memory(
    fuzz_env: FuzzEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fuzz_harness
    import numpy as np

    import vitviz.pipeline.analysis
    from vitviz.imaging import ImageLoadError

    control = _case("control/rgb.png")

    def raw(*_: object, **__: object) -> None:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(vitviz.pipeline.analysis, "analyze", raw)
    got = run_case(control, tmp_path / "raw", fuzz_env, cli=False)
    assert {"raw", "verdict"} <= got.categories(), got.problems

    def two_lines(*_: object, **__: object) -> None:
        error = ImageLoadError("made printable on construction")
        error.args = ("first line\nsecond line",)  # as a subclass that skipped that would
        raise error

    monkeypatch.setattr(vitviz.pipeline.analysis, "analyze", two_lines)
    got = run_case(control, tmp_path / "message", fuzz_env, cli=False)
    assert "message" in got.categories(), got.problems

    def writes(*_: object, **__: object) -> None:
        (fuzz_env.temp / "left-behind.txt").write_text("x")
        raise ImageLoadError("refused")

    monkeypatch.setattr(vitviz.pipeline.analysis, "analyze", writes)
    got = run_case(control, tmp_path / "write", fuzz_env, cli=False)
    (fuzz_env.temp / "left-behind.txt").unlink()
    assert "file" in got.categories(), got.problems

    def hungry(*_: object, **__: object) -> None:
        # 64 MiB of fresh pages from the kernel, every one touched: an allocator's cache of
        # freed memory (still resident, so not growth) can't serve it, whatever ran before
        size = 64 << 20
        with mmap.mmap(-1, size) as block:
            block.write(b"\x01" * size)
            touched = int(np.frombuffer(block, dtype=np.uint8).sum(dtype=np.int64))
        raise ImageLoadError(f"refused after {touched} bytes")

    monkeypatch.setattr(vitviz.pipeline.analysis, "analyze", hungry)
    monkeypatch.setattr(fuzz_harness, "MEMORY_LIMIT_MIB", 32)
    got = run_case(control, tmp_path / "memory", fuzz_env, cli=False)
    assert "memory" in got.categories(), got.problems


def test_harness_sees_wrong_cli_exit_and_stray_lines(
    fuzz_env: FuzzEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from fuzz_harness import Outcome, check_cli

    from vitviz import cli

    def sloppy(argv: list[str]) -> int:
        print("Traceback (most recent call last):\nValueError: boom", file=sys.stderr)
        return 1

    monkeypatch.setattr(cli, "main", sloppy)
    outcome = Outcome("x/y", "checkpoint", "refused")
    check_cli(outcome, "info", ["info", "missing.pth"], 2, 1)
    assert {"raw", "exit"} <= outcome.categories(), outcome.problems
