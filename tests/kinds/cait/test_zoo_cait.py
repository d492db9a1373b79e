"""timm's CaiT as the CaiT kind opens it: talking-heads self-attention over the patches, then
class attention from the CLS. Exact against timm's eager forward on random perturbed
weights (bare state dict and timm's folder), each method equal to a float64 reference written
from its definition in ``vitviz.kinds.cait.methods`` on timm's own matrices and autograd, the
CLI's npz, and the window."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from timm.models import save_for_hf
from timm_cls_checks import (
    assert_library_outputs,
    assert_native_and_folder,
    min_max,
    timm_attention_pass,
)
from zoo_helpers import assert_close, images, randomize_

from vitviz import cli
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.kinds.cait.families import LIBRARY_MODEL
from vitviz.pipeline.analysis import analyze

ARGS = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, depth_token_only=1, num_heads=4)
GRID = (4, 4)


def tiny_cait(seed: int = 0, num_classes: int = 5) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model("cait_xxs24_224", pretrained=False, num_classes=num_classes, **ARGS)
    return randomize_(model, seed=seed)


@pytest.fixture(scope="module")
def cait(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    model = tiny_cait()
    path = tmp_path_factory.mktemp("cait") / "cait.pth"
    torch.save(model.state_dict(), path)
    return model, path


def _compare(model: torch.nn.Module, loaded, x: torch.Tensor) -> None:
    shapes = [(16, 16), (16, 16), (1, 17)]
    logits, _ = assert_library_outputs(LIBRARY_MODEL, model, loaded, x, shapes)
    with torch.no_grad():
        assert_close("fused path", loaded.model(x), logits, 1e-5)


def test_bare_state_dict_and_timm_folder_are_exact(cait, tmp_path: Path) -> None:
    model, path = cait
    x = images(2, 32, 32)
    loaded = load_checkpoint(path)
    assert loaded.family == "timm-cait" and kind_of(loaded.model).name == "cait"
    assert (loaded.config.depth, loaded.config.class_depth, loaded.config.heads) == (3, 1, 4)
    _compare(model, loaded, x)
    assert_native_and_folder(
        model, loaded, tmp_path, ARGS, lambda m, opened: _compare(m, opened, x)
    )


@pytest.mark.parametrize("arch", [None, "cait_xxs24_224"])
def test_the_library_check_builds_the_files_sizes(cait, arch: str | None) -> None:
    """A CaiT of width 32 and 2 + 1 blocks, bare (no timm name has its sizes) or named by
    --arch for timm's 24 + 2-block CaiT: timm's Cait is built with the file's sizes, so the
    check compares (its note says "checked against timm"), never skips nor refuses it."""
    _, path = cait
    loaded = load_checkpoint(path, None if arch is None else {"arch": arch})
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
    assert "width 32, 2 + 1 blocks, 4 heads" in checked[0], checked[0]


def test_computation_changing_model_args_are_refused(cait, tmp_path: Path) -> None:
    model, _ = cait
    folder = tmp_path / "odd"
    save_for_hf(model, folder, model_args=ARGS, safe_serialization=True)
    config = json.loads((folder / "config.json").read_text())
    config["model_args"]["global_pool"] = "avg"  # the mean of the patches: not modelled
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="global_pool 'avg'"):
        load_checkpoint(folder)


def _timm_pass(model: torch.nn.Module, x: torch.Tensor, target: int):
    """timm's matrices in float64 ((H, P, P) per SA layer, (H, 1, 1 + P) per CA layer) and
    their gradients of logit ``target``."""
    ref = model.double()
    return timm_attention_pass([*ref.blocks, *ref.blocks_token_only], ref, x, target)


def _chain(mats: list[torch.Tensor], S: int, q: int | None) -> torch.Tensor:
    """DESIGN's rollout row through CA rows then SA matrices (from the last layer down),
    Ã = rownorm(Â + I): q None is the CLS, else patch q."""
    P = mats[0].shape[-1]
    r = torch.zeros(1 + P, dtype=torch.float64)
    r[0 if q is None else 1 + q] = 1.0
    for m in reversed(mats[S:]):  # (1, 1 + P): the CLS's row; the patches pass on
        row = m[0].clone()
        row[0] += 1.0
        row = row / row.sum()
        r = torch.cat([r[:1] * row[:1], r[1:] + r[0] * row[1:]])
    for m in reversed(mats[:S]):  # (P, P)
        m = m + torch.eye(P, dtype=torch.float64)
        r = torch.cat([r[:1], r[1:] @ (m / m.sum(-1, keepdim=True))])
    out = r[1:].reshape(GRID)
    return out / out.max()


def _min_max(m: torch.Tensor) -> torch.Tensor:
    return min_max(m, GRID)


def test_methods_equal_float64_references(cait, photo_files) -> None:
    _, path = cait
    a = analyze(load_checkpoint(path), photo_files["chelsea"], gradients=True)
    c = a.top_class
    A, G = _timm_pass(tiny_cait(), a.input[None], c)
    S, P = 2, 16
    for q, cell in ((None, None), (5, (1, 1))):
        want = _chain([t.mean(0) for t in A], S, q)
        got = get_method("rollout")(a, cell, c, {"fusion": "mean"})
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
        want = _chain([(t * g).mean(0).clamp(min=0) for t, g in zip(A, G, strict=True)], S, q)
        got = get_method("gradient-rollout")(a, cell, c, {})
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    bars = [(g * t).clamp(min=0).mean(0) for t, g in zip(A, G, strict=True)]
    R_sa = torch.eye(P, dtype=torch.float64)
    for b in bars[:S]:
        R_sa = R_sa + b @ R_sa
    R = torch.block_diag(torch.ones(1, 1, dtype=torch.float64), R_sa)
    for b in bars[S:]:
        R = torch.cat([R[:1] + b @ R, R[1:]])
    torch.testing.assert_close(
        get_method("relevance")(a, None, c, {}).double(), _min_max(R[0, 1:]), rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(  # a patch's relevance: its row of the SA layers' R
        get_method("relevance")(a, (1, 1), c, {}).double(), _min_max(R[6, 1:]), rtol=1e-5, atol=1e-6
    )
    # attention Grad-CAM: ReLU(mean_h A_L[h, CLS, patches] · mean_p G_L[h, CLS, patches])
    cam = (A[-1][:, 0, 1:] * G[-1][:, 0, 1:].mean(-1, keepdim=True)).mean(0).clamp(min=0)
    torch.testing.assert_close(
        get_method("attention-gradcam")(a, None, c, {}).double(),
        _min_max(cam),
        rtol=1e-5,
        atol=1e-6,
    )
    sam = sum((g.clamp(min=0) * t).sum(0)[0, 1:] for t, g in zip(A[S:], G[S:], strict=True))
    torch.testing.assert_close(
        get_method("grad-sam")(a, None, c, {}).double(), _min_max(sam), rtol=1e-5, atol=1e-6
    )
    sam = sum((g.clamp(min=0) * t).sum(0)[5] for t, g in zip(A[:S], G[:S], strict=True))
    torch.testing.assert_close(
        get_method("grad-sam")(a, (1, 1), c, {}).double(), _min_max(sam), rtol=1e-5, atol=1e-6
    )
    # raw attention: the CLS's class-attention row; a patch's row in a self-attention layer
    raw = get_method("attention")(a, None, c, {"layer": -1, "head": 2}).double()
    torch.testing.assert_close(raw, A[2][2, 0, 1:].reshape(GRID), rtol=1e-5, atol=1e-6)
    raw = get_method("attention")(a, (1, 1), c, {"layer": 0, "head": 1}).double()
    torch.testing.assert_close(raw, A[0][1, 5].reshape(GRID), rtol=1e-5, atol=1e-6)


def test_what_a_cait_refuses_says_why(cait, photo_files) -> None:
    _, path = cait
    a = analyze(load_checkpoint(path), photo_files["chelsea"])
    assert get_method("transformer-attribution").unavailable(a) is None  # its own LRP rules
    with pytest.raises(ValueError, match="self-attention block over the patches"):
        get_method("attention")(a, None, None, {"layer": 0})
    with pytest.raises(ValueError, match="only the CLS token queries"):
        get_method("attention")(a, (0, 0), None, {"layer": 2})
    with pytest.raises(ValueError, match="discard"):
        get_method("rollout")(a, None, None, {"discard_ratio": 0.5})
    assert a.entropy[:2].isnan().all() and a.entropy[2].isfinite().all()
    assert a.prefix_share[:2].isnan().all() and a.prefix_share[2].isfinite().all()
    assert a.mean_distance[2].isnan().all() and a.mean_distance[:2].isfinite().all()
    rows = kind_of(a).layer_rows(a)
    assert [r.label for r in rows] == ["SA 0", "SA 1", "CA 0"]


def test_cli_explain_writes_the_shared_npz_keys(cait, photo_files, tmp_path: Path) -> None:
    _, path = cait
    image = photo_files["chelsea"]
    out = tmp_path / "out"
    code = cli.main(["explain", str(image), "--checkpoint", str(path), "--out", str(out)])
    assert code == 0
    assert (out / f"{image.stem}_heads.png").exists()  # the CLS's rows: CA only, SA blank
    with np.load(out / f"{image.stem}.npz") as npz:
        keys = set(npz.files)
        assert {"attention", "rollout", "relevance", "grid", "num_prefix_tokens"} <= keys, keys
        assert npz["attention"].shape[:2] == (3, 4) and tuple(npz["grid"]) == GRID
        assert npz["class_attention_layers"].tolist() == [False, False, True]
        a = analyze(load_checkpoint(path), image)
        np.testing.assert_allclose(npz["rollout"], a.rollout().numpy(), atol=1e-6)
