"""timm's ConViT as the ConViT kind opens it: GPSA blocks over the patches, then plain
self-attention once the CLS joins. Exact against timm's eager forward on random perturbed
weights (bare state dict and timm's folder), the GPSA attention equal to its DESIGN §5
definition written out in float64 from timm's parameters, each method equal to a float64
reference written from its definition in ``vitviz.kinds.convit.methods`` on timm's own
matrices and autograd, and what a ConViT can't do refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

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
from zoo_helpers import ATTN_ATOL, LOGIT_ATOL, assert_close, images, randomize_

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.kinds.convit.families import LIBRARY_MODEL
from vitviz.pipeline.analysis import analyze

# width 8 · 4 heads = 32, 2 GPSA blocks then 1 plain, a 4 × 4 grid
ARGS = dict(img_size=32, patch_size=8, embed_dim=8, depth=3, local_up_to_layer=2, num_heads=4)
GRID = (4, 4)
S, P = 2, 16


def tiny_convit(seed: int = 0, num_classes: int = 5) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model("convit_tiny", pretrained=False, num_classes=num_classes, **ARGS)
    model = randomize_(model, seed=seed)
    with torch.no_grad():  # gates spread over both sides: content and position both count
        for block in model.blocks[:S]:
            block.attn.gating_param.copy_(torch.tensor([-2.0, -0.5, 0.5, 2.0]))
            block.attn.pos_proj.weight.mul_(4.0)  # peaked positional attention
    return model


@pytest.fixture(scope="module")
def convit(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    model = tiny_convit()
    path = tmp_path_factory.mktemp("convit") / "convit.pth"
    torch.save(model.state_dict(), path)
    return model, path


def _compare(model: torch.nn.Module, loaded, x: torch.Tensor) -> None:
    shapes = [(16, 16), (16, 16), (17, 17)]
    logits, scale = assert_library_outputs(LIBRARY_MODEL, model, loaded, x, shapes)
    with torch.no_grad():
        assert_close("fused path", loaded.model(x) / scale, logits / scale, LOGIT_ATOL)


def test_bare_state_dict_and_timm_folder_are_exact(convit, tmp_path: Path) -> None:
    model, path = convit
    x = images(2, 32, 32)
    loaded = load_checkpoint(path)
    assert loaded.family == "timm-convit" and kind_of(loaded.model).name == "convit"
    cfg = loaded.config
    assert (cfg.depth, cfg.gpsa_depth, cfg.heads, cfg.dim) == (3, 2, 4, 32)
    assert any(n.startswith("checked against timm") for n in loaded.notes), loaded.notes
    _compare(model, loaded, x)
    assert_native_and_folder(
        model, loaded, tmp_path, ARGS, lambda m, opened: _compare(m, opened, x)
    )


def test_gpsa_attention_is_its_definition(convit) -> None:
    """A_h = ((1 − σ(g_h))·softmax(q_h k_hᵀ/√d) + σ(g_h)·softmax(pos_proj(r)_h)) / rowsum, r_ij
    = (x_j − x_i, y_j − y_i, their squared distance), from timm's parameters in float64 loops,
    equals timm's GPSA attention and vitviz's."""
    _, path = convit
    loaded = load_checkpoint(path)
    x = images(1, 32, 32)
    ref = tiny_convit().double()
    inputs: list[torch.Tensor] = []
    block = ref.blocks[1]
    block.attn.register_forward_pre_hook(lambda _m, a: inputs.append(a[0]))
    _, theirs = LIBRARY_MODEL.read(ref, x.double())
    with torch.no_grad():
        _, ours = kind_of(loaded.model).library_outputs(loaded.model, x)
    X = inputs[0][0].detach()  # (P, D) normed patches
    attn = block.attn
    H, D = 4, 32
    hd = D // H
    assert attn.qk.bias is None  # timm's ConViTs: no q/k bias
    qk = X @ attn.qk.weight.detach().T
    side = 4
    want = torch.zeros(H, P, P, dtype=torch.float64)
    with torch.no_grad():
        _definition(want, qk, attn, side, H, D, hd)
    assert float((theirs[1][0] - want).abs().max()) < 1e-9
    assert float((ours[1][0].double() - want).abs().max()) < ATTN_ATOL
    gates = torch.sigmoid(attn.gating_param.detach())
    assert float(gates.min()) < 0.2 and float(gates.max()) > 0.8  # both sides weigh


def _definition(want, qk, attn, side, H, D, hd) -> None:
    for h in range(H):
        q, k = qk[:, h * hd : (h + 1) * hd], qk[:, D + h * hd : D + (h + 1) * hd]
        gate = 1.0 / (1.0 + torch.exp(-attn.gating_param[h]))
        for i in range(P):
            yi, xi = divmod(i, side)
            content = [float(q[i] @ k[j]) * hd**-0.5 for j in range(P)]
            position = []
            for j in range(P):
                yj, xj = divmod(j, side)
                dx, dy = xj - xi, yj - yi
                r = torch.tensor([dx, dy, dx * dx + dy * dy], dtype=torch.float64)
                position.append(float(attn.pos_proj.weight[h] @ r + attn.pos_proj.bias[h]))
            c = torch.tensor(content, dtype=torch.float64).softmax(0)
            p = torch.tensor(position, dtype=torch.float64).softmax(0)
            row = (1 - gate) * c + gate * p
            want[h, i] = row / row.sum()


def _timm_pass(model: torch.nn.Module, x: torch.Tensor, target: int):
    """timm's matrices in float64 ((H, P, P) per GPSA layer, (H, N, N) per plain one) and
    their gradients of logit ``target``."""
    ref = model.double()
    return timm_attention_pass(ref.blocks, ref, x, target)


def _rownorm_plus_eye(m: torch.Tensor) -> torch.Tensor:
    m = m + torch.eye(m.shape[-1], dtype=torch.float64)
    return m / m.sum(-1, keepdim=True)


def _chain(mats: list[torch.Tensor], q: int | None) -> torch.Tensor:
    """DESIGN's rollout row, from the last layer down, Ã = rownorm(Â + I): through the plain
    layers over [CLS, patches], then the GPSA layers over the patches (the CLS passing on);
    q None is the CLS, else patch q."""
    r = torch.zeros(1 + P, dtype=torch.float64)
    r[0 if q is None else 1 + q] = 1.0
    for m in reversed(mats[S:]):  # (N, N)
        r = r @ _rownorm_plus_eye(m)
    for m in reversed(mats[:S]):  # (P, P)
        r = torch.cat([r[:1], r[1:] @ _rownorm_plus_eye(m)])
    out = r[1:].reshape(GRID)
    return out / out.max()


def _min_max(m: torch.Tensor) -> torch.Tensor:
    return min_max(m, GRID)


def _embedded(m: torch.Tensor) -> torch.Tensor:
    """A GPSA layer's (P, P) in the (N, N) layout with zeros for the CLS."""
    out = torch.zeros(1 + P, 1 + P, dtype=torch.float64)
    out[1:, 1:] = m
    return out


def test_methods_equal_float64_references(convit, photo_files) -> None:
    _, path = convit
    a = analyze(load_checkpoint(path), photo_files["chelsea"], gradients=True)
    c = a.top_class
    A, G = _timm_pass(tiny_convit(), a.input[None], c)
    for q, cell in ((None, None), (5, (1, 1))):
        want = _chain([t.mean(0) for t in A], q)
        got = get_method("rollout")(a, cell, c, {"fusion": "mean"})
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
        want = _chain([(t * g).mean(0).clamp(min=0) for t, g in zip(A, G, strict=True)], q)
        got = get_method("gradient-rollout")(a, cell, c, {})
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    bars = [(g * t).clamp(min=0).mean(0) for t, g in zip(A, G, strict=True)]
    bars = [_embedded(b) if i < S else b for i, b in enumerate(bars)]
    R = torch.eye(1 + P, dtype=torch.float64)
    for b in bars:
        R = R + b @ R
    for q, cell in ((0, None), (6, (1, 1))):
        got = get_method("relevance")(a, cell, c, {}).double()
        torch.testing.assert_close(got, _min_max(R[q, 1:]), rtol=1e-5, atol=1e-6)
    # attention Grad-CAM: ReLU(mean_h A_L[h, CLS, patches] · mean_p G_L[h, CLS, patches])
    cam = (A[-1][:, 0, 1:] * G[-1][:, 0, 1:].mean(-1, keepdim=True)).mean(0).clamp(min=0)
    got = get_method("attention-gradcam")(a, None, c, {}).double()
    torch.testing.assert_close(got, _min_max(cam), rtol=1e-5, atol=1e-6)
    # Grad-SAM: Σ_{l,h} (G⁺ ⊙ A)[q, patches], the CLS's in the plain layers only
    sam = sum((g.clamp(min=0) * t).sum(0)[0, 1:] for t, g in zip(A[S:], G[S:], strict=True))
    got = get_method("grad-sam")(a, None, c, {}).double()
    torch.testing.assert_close(got, _min_max(sam), rtol=1e-5, atol=1e-6)
    sam = sum((g.clamp(min=0) * t).sum(0)[5] for t, g in zip(A[:S], G[:S], strict=True))
    sam = sam + sum((g.clamp(min=0) * t).sum(0)[6, 1:] for t, g in zip(A[S:], G[S:], strict=True))
    got = get_method("grad-sam")(a, (1, 1), c, {}).double()
    torch.testing.assert_close(got, _min_max(sam), rtol=1e-5, atol=1e-6)
    # raw attention: the CLS's row in a plain layer; a patch's in a GPSA one and a plain one
    raw = get_method("attention")(a, None, c, {"layer": -1, "head": 2}).double()
    torch.testing.assert_close(raw, A[2][2, 0, 1:].reshape(GRID), rtol=1e-5, atol=1e-6)
    raw = get_method("attention")(a, (1, 1), c, {"layer": 0, "head": 1}).double()
    torch.testing.assert_close(raw, A[0][1, 5].reshape(GRID), rtol=1e-5, atol=1e-6)
    raw = get_method("attention")(a, (1, 1), c, {"layer": 2, "head": -1}).double()
    torch.testing.assert_close(raw, A[2][:, 6, 1:].mean(0).reshape(GRID), rtol=1e-5, atol=1e-6)


def test_what_a_convit_refuses_says_why(convit, photo_files) -> None:
    _, path = convit
    a = analyze(load_checkpoint(path), photo_files["chelsea"])
    why = get_method("transformer-attribution").unavailable(a)
    assert why is not None and "GPSA" in why
    with pytest.raises(ValueError, match="GPSA block over the patches"):
        get_method("attention")(a, None, None, {"layer": 0})
    with pytest.raises(ValueError, match="discard"):
        get_method("rollout")(a, None, None, {"discard_ratio": 0.5})
    assert a.prefix_share[:S].isnan().all()  # no CLS key in a GPSA layer
    assert float(a.prefix_share[S:].min()) > 0.0
    assert a.entropy.isfinite().all() and a.mean_distance.isfinite().all()
    assert [r.label for r in kind_of(a).layer_rows(a)] == ["GPSA 0", "GPSA 1", "SA 0"]


def test_what_vitviz_cant_model_is_refused_by_name(convit, tmp_path: Path) -> None:
    model, path = convit
    folder = tmp_path / "odd"
    save_for_hf(model, folder, model_args=ARGS, safe_serialization=True)
    config = json.loads((folder / "config.json").read_text())
    for change, words in (
        ({"global_pool": "avg"}, "global_pool 'avg'"),
        ({"use_pos_embed": False}, "use_pos_embed False"),
    ):
        (folder / "config.json").write_text(
            json.dumps({**config, "model_args": {**config["model_args"], **change}})
        )
        with pytest.raises(CheckpointError, match=words) as info:
            load_checkpoint(folder)
        assert "\n" not in str(info.value)
    state = dict(torch.load(path, weights_only=True))
    del state["blocks.1.attn.pos_proj.bias"]
    broken = tmp_path / "broken.pth"
    torch.save(state, broken)
    with pytest.raises(CheckpointError, match=r"blocks\.1\.attn\.pos_proj\.bias is missing"):
        load_checkpoint(broken)
    with pytest.raises(CheckpointError, match="must be square"):
        load_checkpoint(path, config={"image_size": [32, 16], "preprocessing": {}})


def test_cli_explain_writes_its_maps_and_the_cls_heads(convit, photo_files, tmp_path) -> None:
    import numpy as np
    from PIL import Image

    from vitviz import cli

    _, path = convit
    image = photo_files["chelsea"]
    out = tmp_path / "out"
    code = cli.main(["explain", str(image), "--checkpoint", str(path), "--out", str(out),
                     "--method", "rollout", "relevance", "attention"])  # fmt: skip
    assert code == 0
    for name in ("rollout", "relevance", "attention", "heads"):
        assert (out / f"{image.stem}_{name}.png").exists(), name
    with np.load(out / f"{image.stem}.npz") as npz:
        assert npz["attention"].shape[:3] == (3, 4, 17)
    with Image.open(out / f"{image.stem}_heads.png") as heads:
        assert heads.size[0] > 0
    code = cli.main(["explain", str(image), "--checkpoint", str(path), "--out", str(out),
                     "--method", "transformer-attribution"])  # fmt: skip
    assert code != 0


def test_a_convit_of_other_shapes_with_biases_and_no_head(tmp_path: Path) -> None:
    """A bare ConViT no timm name has (1 GPSA block of 4, 3 heads, q/k/v biases, MLP ×2, no
    head, a 6 × 6 grid): read off its tensors, checked against timm built with them."""
    torch.manual_seed(2)
    model = timm.create_model(
        "convit_tiny", pretrained=False, img_size=48, patch_size=8, embed_dim=8, num_heads=3,
        depth=4, local_up_to_layer=1, qkv_bias=True, mlp_ratio=2.0, num_classes=0,
    )  # fmt: skip
    model = randomize_(model, seed=2)
    path = tmp_path / "odd.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert (cfg.gpsa_depth, cfg.depth, cfg.heads, cfg.qkv_bias, cfg.num_classes) == (
        1, 4, 3, True, 0
    )  # fmt: skip
    assert any(n.startswith("checked against timm") for n in loaded.notes), loaded.notes
    x = images(2, 48, 48)
    ref_logits, ref_attn = LIBRARY_MODEL.read(model, x)
    with torch.no_grad():
        logits, attn = kind_of(loaded.model).library_outputs(loaded.model, x)
    assert_close("features", ref_logits, logits, LOGIT_ATOL * float(ref_logits.abs().max()))
    for i, (a, b) in enumerate(zip(ref_attn, attn, strict=True)):
        assert_close(f"attention {i}", a, b, ATTN_ATOL)
