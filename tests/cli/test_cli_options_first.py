"""The prompt options are read and checked before the model opens: a --target that names none
of the prompts, or a --template without {}, is said in one line even when opening the model
would fail (nothing is loaded for a run that can't go on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitviz.cli import main


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--prompt", "a dog", "--target", "a cat"], "--target 'a cat' is none of the prompts"),
        (["--prompt", "a dog", "--template", "a photo"], "--template must hold {} once"),
    ],
)
def test_prompt_options_are_checked_before_the_model_opens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], said: str
) -> None:
    image = tmp_path / "x.png"
    missing = tmp_path / "no-such-model.safetensors"  # opening it would be the error otherwise
    argv = ["explain", str(image), "--checkpoint", str(missing), "--out", str(tmp_path / "o")]
    assert main([*argv, *options]) == 2
    err = capsys.readouterr().err
    assert said in err and "no-such-model" not in err


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--discard", "1.5"], "--discard must be in [0, 1), got 1.5"),
        ([], "the folder holds no images"),
    ],
)
def test_explain_options_and_images_are_checked_before_the_model_opens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], said: str
) -> None:
    """What the CLI can check alone (--batch-size, --discard, a folder of images that holds
    none) is said in one line before the model opens: its own error never comes first."""
    folder = tmp_path / "empty"
    folder.mkdir()
    (tmp_path / "x.png").write_bytes(b"")  # a file, listed as given
    images = [str(folder)] if not options else [str(tmp_path / "x.png")]
    missing = tmp_path / "no-such-model.safetensors"
    argv = ["explain", *images, "--checkpoint", str(missing), "--out", str(tmp_path / "o")]
    assert main([*argv, *options]) == 2
    err = capsys.readouterr().err
    assert said in err and "no-such-model" not in err
    assert not (tmp_path / "o").exists()
