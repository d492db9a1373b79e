"""Desktop integration files: the .desktop entry validates, install/uninstall round-trips."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINUX = ROOT / "packaging" / "linux"


def test_desktop_entry_validates() -> None:
    tool = shutil.which("desktop-file-validate")
    assert tool, (
        "desktop-file-validate is missing: install Debian's desktop-file-utils (.ci/run does)"
    )
    result = subprocess.run([tool, str(LINUX / "vitviz.desktop")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "", f"validator hints: {result.stdout}"


def test_desktop_entry_opens_images_and_checkpoints() -> None:
    entry = (LINUX / "vitviz.desktop").read_text()
    mime_line = next(line for line in entry.splitlines() if line.startswith("MimeType="))
    types = set(mime_line.split("=", 1)[1].strip(";").split(";"))
    assert {
        "application/x-safetensors",
        "application/x-pytorch-checkpoint",
        "image/png",
        "image/jpeg",
    } <= types
    assert "Exec=vitviz %F" in entry  # files from the file manager reach `vitviz FILE...`
    xml = (LINUX / "vitviz-mime.xml").read_text()
    for glob in ("*.safetensors", "*.pth", "*.pt"):
        assert f'pattern="{glob}"' in xml


def test_install_and_uninstall_for_the_current_user(tmp_path: Path) -> None:
    fake_exec = tmp_path / "bin" / "vitviz"
    fake_exec.parent.mkdir()
    fake_exec.write_text("#!/bin/sh\n")
    fake_exec.chmod(0o755)
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "share")}
    script = LINUX / "install-desktop.sh"
    subprocess.run(
        ["bash", str(script), "--exec", str(fake_exec)], env=env, check=True, capture_output=True
    )
    share = tmp_path / "share"
    entry = (share / "applications" / "vitviz.desktop").read_text()
    assert f"Exec={fake_exec} %F" in entry
    assert (share / "mime" / "packages" / "vitviz-mime.xml").is_file()
    assert (share / "icons" / "hicolor" / "48x48" / "apps" / "vitviz.png").is_file()
    assert (share / "icons" / "hicolor" / "scalable" / "apps" / "vitviz.svg").is_file()
    subprocess.run(["bash", str(script), "--uninstall"], env=env, check=True, capture_output=True)
    assert not (share / "applications" / "vitviz.desktop").exists()
    assert not (share / "mime" / "packages" / "vitviz-mime.xml").exists()
    assert not (share / "icons" / "hicolor" / "48x48" / "apps" / "vitviz.png").exists()


def test_icons_exist_in_every_size() -> None:
    from PIL import Image

    icons = ROOT / "resources" / "icons"
    assert (icons / "vitviz.svg").read_text().startswith("<svg")
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        with Image.open(icons / f"vitviz-{size}.png") as im:
            assert im.size == (size, size)
