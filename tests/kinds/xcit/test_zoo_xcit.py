"""timm's XCiT as the XCiT kind opens it: exact against timm's eager forward (every
XCA block's channel attention, every class-attention row, the logits) on random perturbed
weights and BatchNorm statistics, bare and as timm's folder, with and without ``tokens_norm``;
its token maps come from the class-attention blocks only, and each method on them equals a
float64 reference written from its definition in ``vitviz.kinds.xcit``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from timm.models import save_for_hf
from timm_cls_checks import assert_library_outputs, min_max, timm_attention_pass
from zoo_helpers import assert_close, images, randomize_

from vitviz import cli
from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.kinds.xcit.families import LIBRARY_MODEL
from vitviz.pipeline.analysis import analyze

ARGS = dict(img_size=32, embed_dim=32, depth=2, cls_attn_layers=2, num_heads=4)
GRID = (4, 4)  # 32 px, patch 8


def tiny_xcit(name: str = "xcit_tiny_12_p8_224", seed: int = 0) -> torch.nn.Module:
    """timm's ``name`` at 32 px, width 32, 2 XCA and 2 class-attention blocks: every weight
    and every BatchNorm statistic random."""
    torch.manual_seed(seed)
    model = timm.create_model(name, pretrained=False, num_classes=5, **ARGS)
    randomize_(model, seed=seed)
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(0.2 * torch.randn(m.running_mean.shape, generator=g))
            m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
    return model.eval()


def _compare(model: torch.nn.Module, loaded, x: torch.Tensor) -> None:
    shapes = [(8, 8), (8, 8), (1, 17), (1, 17)]
    logits, _ = assert_library_outputs(LIBRARY_MODEL, model, loaded, x, shapes)
    with torch.no_grad():
        assert_close("fused path", loaded.model(x), logits, 1e-5)


@pytest.mark.parametrize("name", ["xcit_nano_12_p8_224", "xcit_tiny_12_p8_224"])
def test_bare_and_folder_are_exact_with_and_without_tokens_norm(tmp_path: Path, name) -> None:
    model = tiny_xcit(name)
    tokens_norm = model.cls_attn_blocks[0].tokens_norm
    assert tokens_norm == ("nano" not in name)  # timm's own: the weights don't say it
    x = images(2, 32, 32)
    path = tmp_path / "xcit.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, config={"image_size": 32, "tokens_norm": tokens_norm})
    assert loaded.family == "timm-xcit" and kind_of(loaded.model).name == "xcit"
    assert (loaded.config.xca_depth, loaded.config.depth, loaded.config.heads) == (2, 2, 4)
    _compare(model, loaded, x)
    save_for_hf(model, tmp_path / "folder", model_args=ARGS, safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "folder")  # tokens_norm from the architecture
    assert loaded.config.tokens_norm == tokens_norm and loaded.config.image_size == (32, 32)
    assert any(n.startswith("checked against timm") for n in loaded.notes), loaded.notes
    _compare(model, loaded, x)


def test_a_bare_state_dict_says_what_it_assumed(tmp_path: Path) -> None:
    path = tmp_path / "xcit.pth"
    torch.save(tiny_xcit().state_dict(), path)
    notes = load_checkpoint(path).notes
    assert any(n.startswith("tokens_norm True assumed") for n in notes), notes
    assert any(n.startswith("image size 224 assumed") for n in notes), notes


def _timm_pass(model: torch.nn.Module, x: torch.Tensor, target: int):
    """timm's class-attention rows (H, 1, 1 + P) in float64 and their gradients of logit
    ``target``."""
    ref = model.double()
    return timm_attention_pass(ref.cls_attn_blocks, ref, x, target, lambda t: t[0, :, 0])


def _min_max(m: torch.Tensor) -> torch.Tensor:
    return min_max(m, GRID)


def test_methods_run_through_the_class_attention_only(tmp_path: Path, photo_files) -> None:
    model = tiny_xcit(seed=1)
    path = tmp_path / "xcit.pth"
    torch.save(model.state_dict(), path)
    a = analyze(
        load_checkpoint(path, config={"image_size": 32}), photo_files["chelsea"], gradients=True
    )
    c = a.top_class
    A, G = _timm_pass(tiny_xcit(seed=1), a.input[None], c)  # (H, 1 + P) each

    def chain(rows: list[torch.Tensor]) -> torch.Tensor:  # the CLS's row, last layer first
        r = torch.zeros(17, dtype=torch.float64)
        r[0] = 1.0
        for row in reversed(rows):
            row = row.clone()
            row[0] += 1.0
            r = torch.cat([r[:1] * row[:1] / row.sum(), r[1:] + r[0] * row[1:] / row.sum()])
        return (r[1:] / r[1:].max()).reshape(GRID)

    got = get_method("rollout")(a, None, c, {"fusion": "max"}).double()
    torch.testing.assert_close(got, chain([t.max(0).values for t in A]), rtol=1e-5, atol=1e-6)
    want = chain([(t * g).mean(0).clamp(min=0) for t, g in zip(A, G, strict=True)])
    got = get_method("gradient-rollout")(a, None, c, {}).double()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    R = torch.eye(17, dtype=torch.float64)  # R ← R + Ā R with Ā's CLS row, l = 1..L
    for t, g in zip(A, G, strict=True):
        R = torch.cat([R[:1] + (g * t).clamp(min=0).mean(0)[None] @ R, R[1:]])
    got = get_method("relevance")(a, None, c, {}).double()
    torch.testing.assert_close(got, _min_max(R[0, 1:]), rtol=1e-5, atol=1e-6)
    sam = sum((g.clamp(min=0) * t).sum(0)[1:] for t, g in zip(A, G, strict=True))
    got = get_method("grad-sam")(a, None, c, {}).double()
    torch.testing.assert_close(got, _min_max(sam), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="no layer of this model has a patch query"):
        get_method("rollout")(a, (1, 1), c, {})
    with pytest.raises(ValueError, match="only the CLS token queries"):
        get_method("attention")(a, (1, 1), c, {"layer": 0})
    assert get_method("transformer-attribution").unavailable(a) is None  # its CA layers' LRP
    with pytest.raises(ValueError, match="no layer of this model has a patch query"):
        get_method("transformer-attribution")(a, (1, 1), c, {"start_layer": 0})
    assert [r.label for r in kind_of(a).layer_rows(a)] == ["CA 0", "CA 1"]
    assert a.mean_distance.isnan().all() and a.entropy.isfinite().all()


def test_cli_explain_writes_the_shared_npz_keys(tmp_path: Path, photo_files) -> None:
    path = tmp_path / "xcit.pth"
    torch.save(tiny_xcit().state_dict(), path)
    image, out = photo_files["chelsea"], tmp_path / "out"
    args = ["explain", str(image), "--checkpoint", str(path), "--out", str(out)]
    path.with_name("xcit.pth.vitviz.json").write_text('{"image_size": 32}')  # its sidecar
    assert cli.main(args) == 0
    with np.load(out / f"{image.stem}.npz") as npz:
        assert {"attention", "rollout", "relevance", "grid", "kind"} <= set(npz.files)
        assert str(npz["kind"]) == "xcit" and npz["attention"].shape == (2, 4, 17, 17)
        assert npz["class_attention_layers"].tolist() == [True, True]


@pytest.mark.parametrize("arch", [None, "xcit_tiny_12_p8_224"])
def test_the_library_check_builds_the_files_sizes(tmp_path: Path, arch: str | None) -> None:
    """An XCiT of width 32 and 2 + 2 blocks, bare (no timm name has its sizes) or named by
    --arch for timm's 12-block tiny: timm's Xcit is built with the file's sizes, so the check
    compares (its note says "checked against timm"), never skips nor refuses it."""
    model = tiny_xcit()
    path = tmp_path / "xcit.pth"
    torch.save(model.state_dict(), path)
    settings = {"image_size": 32, "tokens_norm": True, **({"arch": arch} if arch else {})}
    loaded = load_checkpoint(path, config=settings)
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
    assert "width 32, 2 + 2 blocks, 4 heads" in checked[0], checked[0]
