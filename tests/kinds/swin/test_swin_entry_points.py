"""A Swin given to the ViT entry points: described by `info`, refused in one line by analyze(),
never a raw traceback (`explain` and the window take it: test_swin_cli.py, test_swin_ui.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from swin_helpers import tiny_torchvision_swin

from vitviz import cli
from vitviz.checkpoints import load_checkpoint
from vitviz.core.errors import VitvizError
from vitviz.pipeline.analysis import UnsupportedModelError, analyze


@pytest.fixture
def swin_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "swin_t_tiny.pth"
    torch.save(tiny_torchvision_swin().state_dict(), path)
    return path


def test_info_describes_the_stages(swin_ckpt: Path, capsys) -> None:
    assert cli.main(["info", str(swin_ckpt)]) == 0
    out = capsys.readouterr().out
    arch = next(line for line in out.splitlines() if line.startswith("architecture:"))
    cfg = load_checkpoint(swin_ckpt).model.config
    assert "Swin" in arch
    assert f"depths {'-'.join(map(str, cfg.depths))}" in arch
    assert f"heads {'-'.join(map(str, cfg.heads))}" in arch


def test_analyze_takes_a_swin_through_its_kind(swin_ckpt: Path, photo_files) -> None:
    """analyze() is the one entry point for every kind: a Swin's is analyze_swin."""
    from vitviz.kinds.swin.analysis import analyze_swin

    loaded = load_checkpoint(swin_ckpt)
    got = analyze(loaded, photo_files["chelsea"])
    want = analyze_swin(loaded, photo_files["chelsea"])
    assert got.kind == "swin" and type(got) is type(want)
    torch.testing.assert_close(got.logits, want.logits)


def test_the_vit_analysis_refuses_a_swin_in_one_line(swin_ckpt: Path, photo_files) -> None:
    from vitviz.kinds.vit.analysis import analyze_vit

    with pytest.raises(UnsupportedModelError, match="Swin") as info:
        analyze_vit(load_checkpoint(swin_ckpt), photo_files["chelsea"])
    assert isinstance(info.value, VitvizError) and "\n" not in str(info.value)


def test_integer_weights_are_refused_by_name(tmp_path: Path) -> None:
    from vitviz.checkpoints import CheckpointError

    state = tiny_torchvision_swin().state_dict()
    state["head.weight"] = state["head.weight"].to(torch.int8)
    path = tmp_path / "int8.pth"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"head\.weight holds int8 numbers"):
        load_checkpoint(path)


def test_the_method_table_says_which_methods_take_a_swin(capsys) -> None:
    import json

    from vitviz.explain.methods import Method, get_method, register_method, unregister_method
    from vitviz.kindapi import get_kind

    assert cli.main(["methods", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    rows = table["methods"] if isinstance(table, dict) else table
    takes = {m["name"] for m in rows if "swin" in m["applies_to"]}
    cams = {"hirescam", "gradcam-plusplus", "xgradcam", "layercam", "gradcam-elementwise",
            "eigen-gradcam", "eigencam", "scorecam", "ablationcam"}  # fmt: skip
    features = {"token-norm", "similarity", "pca"}  # on each block's own grid
    assert (
        takes == {"attention", "rollout", "gradient-rollout", "gradcam", "random"} | cams | features
    )
    swin = get_kind("swin")
    for m in rows:  # the window and the CLI refuse exactly the others, saying why
        why = get_method(m["name"]).missing_on(swin)
        assert (why is None) == (m["name"] in takes)
        assert why is None or ("CLS token" in why and "it runs attention, rollout" in why)
    toy = Method("toy-swin", "Toy", None, applies_to={"swin"})
    register_method(toy)
    try:  # names the kind but has no Swin version, nor one of its own: refused, not run
        why = toy.missing_on(swin)
        assert why is not None and "vitviz has no Swin Transformer version of it" in why
    finally:
        unregister_method("toy-swin")
