"""explain without --checkpoint: the checkpoint the window opened last (read from its QSettings
file without Qt), else the shipped model; one stderr line says which and how to choose another."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSettings

from vitviz.checkpoints import load_checkpoint
from vitviz.core import resources
from vitviz.core.last_model import choose_model, last_checkpoint, qt_string_list
from vitviz.ui.settings import AppSettings

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "resources" / "samples" / "star.png"


def _fresh_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    env["HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _explain_without_checkpoint(home: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vitviz.cli", "explain", str(SAMPLE), "--out", str(out)],
        capture_output=True,
        text=True,
        env=_fresh_env(home),
        timeout=120,
        check=False,
    )


def _window_settings(home: Path) -> AppSettings:
    """The window's settings as Qt writes them under ``home`` (the file QSettings uses there)."""
    path = home / ".config" / "vitviz" / "vitviz.conf"
    return AppSettings(QSettings(str(path), QSettings.Format.IniFormat))


def test_fresh_home_uses_the_shipped_model_and_says_so(tmp_path: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    home.mkdir()
    proc = _explain_without_checkpoint(home, out)
    assert proc.returncode == 0, proc.stderr
    shipped = resources.default_model_path()
    assert shipped is not None
    said = [line for line in proc.stderr.splitlines() if "no --checkpoint" in line]
    assert len(said) == 1
    assert str(shipped) in said[0] and "shipped" in said[0] and "--checkpoint FILE" in said[0]
    with np.load(out / "star.npz") as z:
        assert list(z["class_names"]) == load_checkpoint(shipped).class_names
    assert (out / "star_rollout.png").is_file()


def test_the_checkpoint_opened_last_in_the_window_wins(tmp_path: Path, tiny_ckpt: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    odd = tmp_path / 'a dir, "quoted"' / "tiny model.safetensors"  # Qt quotes and escapes it
    odd.parent.mkdir()
    tiny_ckpt.rename(odd)
    settings = _window_settings(home)
    settings.add_recent("checkpoints", tmp_path / "deleted-since.safetensors")
    settings.add_recent("checkpoints", odd)
    settings.qs.sync()
    assert last_checkpoint(home / ".config" / "vitviz" / "vitviz.conf") == odd

    proc = _explain_without_checkpoint(home, out)
    assert proc.returncode == 0, proc.stderr
    assert str(odd) in proc.stderr and "opened last in the window" in proc.stderr
    with np.load(out / "star.npz") as z:
        assert list(z["class_names"]) == load_checkpoint(odd).class_names


def test_a_recent_list_of_missing_files_falls_back_to_the_shipped_model(tmp_path: Path) -> None:
    settings = _window_settings(tmp_path)
    settings.add_recent("checkpoints", tmp_path / "gone.pth")
    settings.add_recent("images", tmp_path / "photo.png")
    settings.qs.sync()
    choice = choose_model(tmp_path / ".config" / "vitviz" / "vitviz.conf")
    assert choice is not None
    assert choice.path == resources.default_model_path() and "shipped" in choice.why
    assert choose_model(tmp_path / "no-such.conf") == choice


@pytest.mark.parametrize(
    ("raw", "items"),
    [
        ("/a/b.pth", ["/a/b.pth"]),
        ('/a/b.pth, "/c/d, e.pth", /f g.pt', ["/a/b.pth", "/c/d, e.pth", "/f g.pt"]),
        (r'"/x/\"q\"\\y.pth"', ['/x/"q"\\y.pth']),
        (r"/x/\x44.pth", ["/x/D.pth"]),
        ("@@home.pth", ["@home.pth"]),
        ("@Invalid()", []),
        ("", []),
    ],
)
def test_qt_string_lists_are_read_as_qt_writes_them(raw: str, items: list[str]) -> None:
    assert qt_string_list(raw) == items


def test_model_args_without_model_code_is_still_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vitviz.cli import main

    argv = ["explain", str(SAMPLE), "--model-args", "{}", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == "vitviz-cli: --model-args needs --model-code FILE.py:NAME"
    assert not (tmp_path / "o").exists()
