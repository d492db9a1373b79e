"""Knocking heads out (DESIGN §5, "Interventions") against hand-written forward passes: a
torchvision ViT's whole pass, and a timm Swin's window attention (shifted, padded windows) with
the ablation written into it by hand. Zero, mean and dataset-mean ablation, through ``analyze``
(the kind's own analysis, intervened) and through ``head_effects`` (the accessor, batched);
patching; refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from safetensors.torch import save_file
from swin_helpers import tiny_timm_swin
from torch import Tensor, nn
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.core.errors import VitvizError
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.head_effects import head_effects, patched_logits, patching_effects
from vitviz.pipeline.interventions import DatasetMean, InterventionError, dataset_mean

RTOL = 1e-4


def _rel(got: Tensor, ref: Tensor) -> float:
    return float((got.double() - ref.double()).abs().max() / ref.double().abs().max())


def _ablate(a: Tensor, heads: dict[int, object], real: Tensor | None = None) -> Tensor:
    """(B, H, N, hd) heads' outputs with ``heads`` {head: "zero" | "mean" | (hd,)} replaced on
    every token; "mean" over each image's tokens (``real`` (B, N) bool: which are the image's,
    a Swin's padding slots are not). Written here from the definitions, not from vitviz."""
    out = a.clone()
    for h, how in heads.items():
        if isinstance(how, str) and how == "zero":
            out[:, h] = 0.0
        elif isinstance(how, str) and how == "mean":
            keep = torch.ones(a.shape[0], a.shape[2], dtype=torch.bool) if real is None else real
            w = keep[..., None].to(a.dtype)
            mean = (a[:, h] * w).sum(1) / w.sum(1)  # (B, hd)
            out[:, h] = mean[:, None]
        else:
            out[:, h] = how
    return out


# -- torchvision's ViT, written out -----------------------------------------------------------
def _tv_forward(
    m: nn.Module, x: Tensor, plan: dict[int, dict[int, object]], seen=None, no_mlp=()
) -> Tensor:
    """torchvision ``VisionTransformer`` (eval) by hand; ``plan`` {layer: {head: how}};
    ``seen`` (a list) gets each layer's heads' outputs (B, H, N, hd) before the ablation;
    the blocks of ``no_mlp`` add no MLP branch."""
    B = x.shape[0]
    t = F.conv2d(x, m.conv_proj.weight, m.conv_proj.bias, stride=m.patch_size)
    t = t.flatten(2).transpose(1, 2)
    t = torch.cat([m.class_token.expand(B, -1, -1), t], dim=1) + m.encoder.pos_embedding
    for i, layer in enumerate(m.encoder.layers):
        mha = layer.self_attention
        H, D = mha.num_heads, t.shape[-1]
        hd = D // H
        y = F.layer_norm(t, (D,), layer.ln_1.weight, layer.ln_1.bias, layer.ln_1.eps)
        q, k, v = (y @ mha.in_proj_weight.T + mha.in_proj_bias).split(D, dim=-1)
        q, k, v = (z.unflatten(-1, (H, hd)).transpose(1, 2) for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1) @ v  # (B, H, N, hd)
        if seen is not None:
            seen.append(a)
        a = _ablate(a, plan.get(i, {}))
        o = a.transpose(1, 2).flatten(2) @ mha.out_proj.weight.T + mha.out_proj.bias
        t = t + o
        if i in no_mlp:
            continue
        y = F.layer_norm(t, (D,), layer.ln_2.weight, layer.ln_2.bias, layer.ln_2.eps)
        y = F.gelu(y @ layer.mlp[0].weight.T + layer.mlp[0].bias)
        t = t + y @ layer.mlp[3].weight.T + layer.mlp[3].bias
    ln = m.encoder.ln
    t = F.layer_norm(t, (t.shape[-1],), ln.weight, ln.bias, ln.eps)
    return t[:, 0] @ m.heads.head.weight.T + m.heads.head.bias


@pytest.fixture(scope="module")
def tv(tmp_path_factory):
    """(torchvision model, vitviz's model opened from its file, two images)."""
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
        num_classes=5,
    )  # fmt: skip
    randomize_(model, seed=7, scale=0.4)
    assert model.heads.head.weight.abs().min() > 0  # a head that is not torchvision's zeros
    path = tmp_path_factory.mktemp("tv") / "vit.pth"
    torch.save(model.state_dict(), path)
    return model.eval(), load_checkpoint(path, config={"heads": 2}), images(3, 32, 32, seed=3)


ABLATIONS = {
    "one head": [(1, 0)],
    "heads of two layers": [(0, 1), (1, 0)],
    "a whole layer": [(0, 0), (0, 1)],
}


@pytest.mark.parametrize("mode", ["zero", "mean"])
@pytest.mark.parametrize("which", list(ABLATIONS))
def test_analyze_ablated_is_the_hand_written_vit(tv, mode, which) -> None:
    model, loaded, xs = tv
    heads = ABLATIONS[which]
    plan: dict[int, dict[int, object]] = {}
    for layer, head in heads:
        plan.setdefault(layer, {})[head] = mode
    with torch.no_grad():
        ref = _tv_forward(model, xs[:1], plan)[0]
        full = _tv_forward(model, xs[:1], {})[0]
    got = analyze(loaded, xs[0], ablate=heads, ablation=mode, gradients=True)
    assert _rel(got.logits, ref) < RTOL
    assert _rel(full, ref) > 1e-3  # the heads matter: the comparison can fail
    clean = analyze(loaded, xs[0])  # and the model is left as it was
    assert _rel(clean.logits, full) < RTOL


def test_dataset_mean_is_the_hand_written_vit(tv) -> None:
    model, loaded, xs = tv
    seen: list[list[Tensor]] = []
    with torch.no_grad():
        for x in xs:
            seen.append([])
            _tv_forward(model, x[None], {}, seen[-1])
        # per layer (H, hd): the mean over the images of each image's mean over its tokens
        means = [torch.stack([s[i][0].mean(1) for s in seen]).mean(0) for i in range(2)]
        ref = _tv_forward(model, xs[:1], {0: {1: means[0][1]}, 1: {0: means[1][0]}})[0]
    got = dataset_mean(loaded.kind, loaded.model, list(xs))
    assert got.images == 3 and len(got.means) == 2
    for ours, theirs in zip(got.means, means, strict=True):
        assert _rel(ours, theirs) < 1e-5
    out = analyze(loaded, xs[0], ablate=[(0, 1), (1, 0)], ablation=got)
    assert _rel(out.logits, ref) < RTOL
    effects = head_effects(loaded, xs[0], mode=got)
    with torch.no_grad():
        alone = _tv_forward(model, xs[:1], {1: {0: means[1][0]}})[0]
    c = effects.target
    assert abs(float(effects.effect[1, 0]) - float(effects.logits[c] - alone[c])) < 1e-5
    assert effects.mode == "dataset-mean"


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_head_effects_are_one_at_a_time_runs(tv, mode) -> None:
    model, loaded, xs = tv
    effects = head_effects(loaded, xs[1], mode=mode, batch=1 if mode == "mean" else None)
    with torch.no_grad():
        full = _tv_forward(model, xs[1:2], {})[0]
        c = int(full.argmax())
        assert effects.target == c
        for layer in range(2):
            for head in range(2):
                alone = _tv_forward(model, xs[1:2], {layer: {head: mode}})[0]
                want = float(full[c] - alone[c])
                assert abs(float(effects.effect[layer, head]) - want) < 1e-5 * (1 + abs(want))
                p = float(full.softmax(-1)[c] - alone.softmax(-1)[c])
                assert abs(float(effects.effect_prob[layer, head]) - p) < 1e-6
    assert effects.effect.abs().min() > 1e-4  # every head matters here


def test_a_chosen_class(tv) -> None:
    model, loaded, xs = tv
    effects = head_effects(loaded, xs[0], target=3)
    with torch.no_grad():
        full = _tv_forward(model, xs[:1], {})[0]
        alone = _tv_forward(model, xs[:1], {0: {1: "zero"}})[0]
    assert effects.target == 3
    assert abs(float(effects.effect[0, 1]) - float(full[3] - alone[3])) < 1e-5


def test_patching(tv) -> None:
    model, loaded, xs = tv
    a, b = xs[0], xs[1]
    every = [(layer, head) for layer in range(2) for head in range(2)]
    with torch.no_grad():
        ya, yb = model(a[None])[0], model(b[None])[0]
    assert _rel(patched_logits(loaded, a, a, every), ya) < 1e-5  # every head from A into A: A
    assert _rel(patched_logits(loaded, a, b, []), yb) < 1e-5  # nothing patched: B
    effects = patching_effects(loaded, a, b)
    c = int(ya.argmax())
    assert effects.target == c
    for layer, head in every:  # each effect is its own single patch, scaled
        one = patched_logits(loaded, a, b, [(layer, head)])
        want = float((one[c] - yb[c]) / (ya[c] - yb[c]))
        assert abs(float(effects.effect[layer, head]) - want) < 1e-4 * (1 + abs(want))
    # all heads of the last layer from A: that layer's attention branch is A's
    last = patched_logits(loaded, a, b, [(1, 0), (1, 1)])
    assert _rel(last, yb) > 1e-3


def test_the_attention_branch_of_a_block(tv) -> None:
    model, loaded, xs = tv
    with torch.no_grad():
        zeroed = _tv_forward(model, xs[:1], {0: {0: "zero", 1: "zero"}})[0]
        out_proj = model.encoder.layers[0].self_attention.out_proj
        bias = out_proj.bias.clone()
        out_proj.bias.zero_()  # the branch is 0: the heads zero and no bias
        ref = _tv_forward(model, xs[:1], {0: {0: "zero", 1: "zero"}})[0]
        out_proj.bias.copy_(bias)
    got = analyze(loaded, xs[0], ablate_attention=[0])
    assert _rel(got.logits, ref) < RTOL
    assert _rel(zeroed, ref) > 1e-3  # zeroing every head keeps the bias: another thing


@pytest.mark.parametrize("blocks", [[0], [1], [0, 1]])
def test_the_mlp_branch_of_a_block(tv, blocks) -> None:
    model, loaded, xs = tv
    with torch.no_grad():
        ref = _tv_forward(model, xs[:1], {}, no_mlp=blocks)[0]
        full = _tv_forward(model, xs[:1], {})[0]
    got = analyze(loaded, xs[0], ablate_mlp=blocks, gradients=True)
    assert _rel(got.logits, ref) < RTOL
    assert _rel(full, ref) > 1e-3  # the branch matters: the comparison can fail
    both = analyze(loaded, xs[0], ablate=[(0, 1)], ablate_mlp=blocks)  # with a head too
    with torch.no_grad():
        ref_both = _tv_forward(model, xs[:1], {0: {1: "zero"}}, no_mlp=blocks)[0]
    assert _rel(both.logits, ref_both) < RTOL
    assert _rel(analyze(loaded, xs[0]).logits, full) < RTOL  # the hooks are gone


def test_an_intervened_analysis_says_so_in_its_npz(tv, tmp_path) -> None:
    from vitviz.pipeline.export import compute_maps, write_npz

    _, loaded, xs = tv
    got = analyze(loaded, xs[0], ablate=[(1, 0), (0, 1)], ablation="mean", ablate_mlp=[1])
    write_npz(got, compute_maps(got), tmp_path / "a.npz")
    a = np.load(tmp_path / "a.npz")
    assert a["ablated"].dtype == np.int64 and a["ablated"].tolist() == [[0, 1], [1, 0]]
    assert str(a["ablation"]) == "mean"
    assert a["ablated_mlp"].tolist() == [1] and a["ablated_attention"].tolist() == []
    clean = analyze(loaded, xs[0])
    write_npz(clean, compute_maps(clean), tmp_path / "b.npz")
    assert "ablated" not in np.load(tmp_path / "b.npz")  # a clean model's file has no record


@pytest.mark.parametrize(
    "call",
    [
        lambda lo, x: analyze(lo, x, ablate=[(2, 0)]),
        lambda lo, x: analyze(lo, x, ablate=[(1, 2)]),
        lambda lo, x: analyze(lo, x, ablate_attention=[5]),
        lambda lo, x: analyze(lo, x, ablate_mlp=[2]),
        lambda lo, x: patched_logits(lo, x, x, [(7, 0)]),
        lambda lo, x: analyze(lo, x, ablate=[(0, 0)], ablation="median"),
        lambda lo, x: analyze(lo, x, ablate=[(0, 0)], ablation=torch.zeros(3)),
        lambda lo, x: head_effects(lo, x, target=9),
        lambda lo, x: head_effects(lo, x, plan="sideways"),
        lambda lo, x: patching_effects(lo, x, x + 1, batch=0),
    ],
)
def test_what_the_model_lacks_is_refused_in_one_line(tv, call) -> None:
    _, loaded, xs = tv
    with pytest.raises(VitvizError) as info:
        call(loaded, xs[0])
    assert isinstance(info.value, InterventionError)
    assert "\n" not in str(info.value) and len(str(info.value)) < 160
    with torch.no_grad():  # no hook is left behind
        assert _rel(loaded.model(xs[:1])[0], tv[0](xs[:1])[0]) < 1e-5


def test_patching_needs_two_inputs_of_one_size(tv) -> None:
    _, loaded, xs = tv
    with pytest.raises(InterventionError, match="one size"):
        patching_effects(loaded, xs[0], images(1, 48, 32)[0])


# -- a timm Swin's window attention, written out ----------------------------------------------
SWIN_SIZE = (60, 52)  # 15 × 13 tokens at patch 4: windows of 4 padded, and shifted


def _hand_window_attention(attn: nn.Module, real: Tensor, plan: dict[int, object], seen=None):
    """A forward for timm's ``WindowAttention`` written out (explicit softmax, the relative
    position bias and the shift mask), ``plan``'s heads replaced before the projection;
    ``real`` (windows, n) bool: which slots hold the image's tokens (B = 1)."""

    def forward(x: Tensor, mask: Tensor | None = None) -> Tensor:
        Bw, n, C = x.shape
        H = attn.num_heads
        q, k, v = attn.qkv(x).reshape(Bw, n, 3, H, C // H).permute(2, 0, 3, 1, 4)
        scores = (q * attn.scale) @ k.transpose(-2, -1) + attn._get_rel_pos_bias()
        if mask is not None:
            scores = scores + mask[:, None]
        a = scores.softmax(-1) @ v  # (windows, H, n, hd)
        if seen is not None:
            seen.append((a, real))
        # the windows as one image: (1, H, windows · n, hd)
        flat = a.transpose(0, 1).reshape(1, H, Bw * n, -1)
        flat = _ablate(flat, plan, real.reshape(1, -1))
        a = flat.reshape(H, Bw, n, -1).transpose(0, 1)
        return attn.proj(a.transpose(1, 2).reshape(Bw, n, C))

    return forward


def _real_slots(block: nn.Module, grid: tuple[int, int]) -> Tensor:
    """(windows, n) bool: the slots of ``block``'s windows that hold grid tokens."""
    from timm.models.swin_transformer import window_partition

    ws = block.window_size
    ones = torch.ones(1, *grid, 1)
    pad_h, pad_w = (-grid[0]) % ws[0], (-grid[1]) % ws[1]
    padded = F.pad(ones, (0, 0, 0, pad_w, 0, pad_h))
    return window_partition(padded, ws).reshape(-1, ws[0] * ws[1]) > 0


def _swin_forward(model: nn.Module, x: Tensor, plan, seen=None) -> Tensor:
    """timm's Swin (eval) with each block's window attention the hand-written one."""
    blocks = [b for stage in model.layers for b in stage.blocks]
    grids = [(15, 13), (15, 13), (8, 7), (8, 7)]
    saved = []
    for i, block in enumerate(blocks):
        saved.append(block.attn.forward)
        real = _real_slots(block, grids[i])
        block.attn.forward = _hand_window_attention(block.attn, real, plan.get(i, {}), seen)
    try:
        with torch.no_grad():
            return model(x)[0]
    finally:
        for block, forward in zip(blocks, saved, strict=True):
            block.attn.forward = forward


@pytest.fixture(scope="module")
def swin(tmp_path_factory):
    ref = tiny_timm_swin(SWIN_SIZE, window=4, seed=11).eval()
    folder = tmp_path_factory.mktemp("swin")
    path = folder / "model.safetensors"
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    side = {"preprocessing": {"image_size": list(SWIN_SIZE)}}
    (folder / "model.safetensors.vitviz.json").write_text(json.dumps(side))
    return ref, load_checkpoint(path), images(2, *SWIN_SIZE, seed=5)


SWIN_ABLATIONS = {"a shifted padded block's head": [(1, 1)], "two blocks": [(1, 0), (2, 3)]}


@pytest.mark.parametrize("mode", ["zero", "mean"])
@pytest.mark.parametrize("which", list(SWIN_ABLATIONS))
def test_analyze_ablated_is_the_hand_written_swin(swin, mode, which) -> None:
    ref_model, loaded, xs = swin
    plan: dict[int, dict[int, object]] = {}
    for layer, head in SWIN_ABLATIONS[which]:
        plan.setdefault(layer, {})[head] = mode
    ref = _swin_forward(ref_model, xs[:1], plan)
    full = _swin_forward(ref_model, xs[:1], {})
    with torch.no_grad():
        assert _rel(full, ref_model(xs[:1])[0]) < RTOL  # the hand-written pass is timm's
    got = analyze(loaded, xs[0], ablate=SWIN_ABLATIONS[which], ablation=mode)
    assert _rel(got.logits, ref) < RTOL
    assert _rel(full, ref) > 1e-3


def test_the_mlp_branch_of_a_swin_block(swin) -> None:
    ref_model, loaded, xs = swin
    blocks = [b for stage in ref_model.layers for b in stage.blocks]
    saved = blocks[2].mlp.forward
    blocks[2].mlp.forward = torch.zeros_like  # timm's block then adds no MLP branch
    try:
        with torch.no_grad():
            ref = ref_model(xs[:1])[0]
    finally:
        blocks[2].mlp.forward = saved
    with torch.no_grad():
        full = ref_model(xs[:1])[0]
    got = analyze(loaded, xs[0], ablate_mlp=[2])
    assert _rel(got.logits, ref) < RTOL
    assert _rel(full, ref) > 1e-3
    assert _rel(analyze(loaded, xs[0]).logits, full) < RTOL


def test_swin_dataset_mean_and_effects(swin) -> None:
    ref_model, loaded, xs = swin
    per_image = []
    for x in xs:
        seen: list = []
        _swin_forward(ref_model, x[None], {}, seen)
        a, real = seen[1]  # block 1: (windows, H, n, hd)
        w = real[:, None, :, None].to(a.dtype)
        per_image.append((a * w).sum((0, 2)) / w.sum((0, 2)))  # (H, hd)
    mean = torch.stack(per_image).mean(0)
    got = dataset_mean(loaded.kind, loaded.model, list(xs))
    assert isinstance(got, DatasetMean) and _rel(got.means[1], mean) < 1e-5
    ref = _swin_forward(ref_model, xs[:1], {1: {1: mean[1]}})
    assert _rel(analyze(loaded, xs[0], ablate=[(1, 1)], ablation=got).logits, ref) < RTOL
    effects = head_effects(loaded, xs[0], mode="mean")
    full = _swin_forward(ref_model, xs[:1], {})
    c = effects.target
    for layer, head in [(0, 1), (1, 0), (3, 2)]:
        alone = _swin_forward(ref_model, xs[:1], {layer: {head: "mean"}})
        want = float(full[c] - alone[c])
        assert abs(float(effects.effect[layer, head]) - want) < 1e-4 * (1 + abs(want))
    assert effects.effect[:2, 2:].isnan().all()  # stage 0's blocks have 2 heads, not 4


@pytest.mark.parametrize("which", ["tv", "swin"])
def test_the_blocks_below_a_layer_run_once(which, request) -> None:
    """The single-head passes of layer l reuse the full pass's blocks below l: those blocks'
    insides (their MLPs) do not run again, and the effects still equal single passes above."""
    from vitviz.pipeline.head_effects import full_pass

    _, loaded, xs = request.getfixturevalue(which)
    kind, model = loaded.kind, loaded.model
    base, cache = full_pass(kind, model, xs[:1].to(torch.float32))
    assert cache is not None
    ran: list[int] = []
    projected: list[int] = []
    mlps = [b.mlp for b in cache.blocks]
    handles = [m.register_forward_hook(lambda m, a, o, i=i: ran.append(i)) for i, m in
               enumerate(mlps)]  # fmt: skip
    handles += [p.register_forward_hook(lambda m, a, o, i=i: projected.append(i)) for i, p in
                enumerate(base.projections)]  # fmt: skip
    try:
        layer = len(base.heads) - 1
        with cache.below(layer, 2), torch.no_grad():
            out = kind.intermediates(model, xs[:1].expand(2, -1, -1, -1), logits_only=True)
    finally:
        for h in handles:
            h.remove()
    assert ran == [cache.owners[layer]]  # only the last block ran
    assert projected == [layer]  # and no attention below it: nothing reads its heads again
    _close = _rel(out.logits[1], base.logits[0])
    assert _close < 1e-5


def test_a_folders_mean_is_computed_once_per_model_and_folder(tv, tmp_path) -> None:
    from PIL import Image

    from vitviz.pipeline import folder_mean as module

    _, loaded, _ = tv
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(
            tmp_path / f"{i}.png"
        )
    first = module.folder_mean(loaded, tmp_path)
    inputs = [analyze(loaded, tmp_path / f"{i}.png").input for i in range(2)]
    want = dataset_mean(loaded.kind, loaded.model, inputs)
    for ours, theirs in zip(first.means, want.means, strict=True):
        assert _rel(ours, theirs) < 1e-6
    assert module.folder_mean(loaded, tmp_path) is first  # kept
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(tmp_path / "2.png")
    third = module.folder_mean(loaded, tmp_path)  # the folder changed: computed again
    assert third is not first and third.images == 3
    with pytest.raises(InterventionError, match="no image"):
        empty = tmp_path / "empty"
        empty.mkdir()
        (empty / "bad.png").write_bytes(b"not a png")
        module.folder_mean(loaded, empty)


@pytest.mark.parametrize(
    ("overrides", "zeroed"),
    [
        ({"res_post_norm": True, "layer_scale_init": 0.5}, ("norm2.weight", "norm2.bias")),
        ({"parallel": True}, ("mlp_out_proj.weight", "mlp_out_proj.bias")),
    ],
)
def test_the_mlp_branch_of_other_blocks(tmp_path, overrides, zeroed) -> None:
    """A residual post-norm block (x + norm2(mlp(x))) and a parallel block: the branch knocked
    out is the same model with the branch's last weights set to 0 (the branch is then 0)."""
    from conftest import random_vit

    from vitviz.checkpoints import save_checkpoint

    model = random_vit(seed=4, **overrides)
    path = save_checkpoint(model, tmp_path / "a.safetensors")
    x = images(1, 32, 32, seed=2)[0]
    got = analyze(load_checkpoint(path), x, ablate_mlp=[1]).logits
    with torch.no_grad():
        for name in zeroed:
            model.blocks[1].get_parameter(name).zero_()
    ref = analyze(load_checkpoint(save_checkpoint(model, tmp_path / "b.safetensors")), x).logits
    full = analyze(load_checkpoint(path), x).logits
    assert _rel(got, ref) < RTOL
    assert _rel(full, ref) > 1e-3


def test_the_attention_branch_of_a_residual_post_norm_block(tmp_path) -> None:
    """x + ls1(norm1(attn(x))): the branch knocked out is the block written by hand without it,
    x + ls2(norm2(mlp(x))), not x + ls1(norm1(0)) (norm1's bias would still be added)."""
    from conftest import random_vit

    from vitviz.checkpoints import save_checkpoint

    path = save_checkpoint(
        random_vit(seed=4, res_post_norm=True, layer_scale_init=0.5), tmp_path / "rpn.safetensors"
    )
    x = images(1, 32, 32, seed=2)[0]
    got = analyze(load_checkpoint(path), x, ablate_attention=[1]).logits
    ref_model = load_checkpoint(path).model
    block = ref_model.blocks[1]

    def without_attention(t: Tensor, **_: object) -> tuple[Tensor, None]:
        return t + block.ls2(block.norm2(block.mlp(t))), None

    with torch.no_grad():
        full = ref_model(x[None])[0]
        block.forward = without_attention
        ref = ref_model(x[None])[0]
    assert _rel(got, ref) < RTOL
    assert _rel(full, ref) > 1e-3


def test_the_attention_branch_of_a_swin_v2_block(tmp_path) -> None:
    """timm's Swin v2 block adds norm1(attn(x)): knocked out, it is the block written by hand
    without the branch, x + norm2(mlp(x))."""
    ref_model = tiny_timm_swin(SWIN_SIZE, window=4, seed=11, version=2).eval()
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in ref_model.state_dict().items()}, str(path))
    side = {"preprocessing": {"image_size": list(SWIN_SIZE)}, "window_sizes": [4, 4]}
    (tmp_path / "model.safetensors.vitviz.json").write_text(json.dumps(side))
    x = images(1, *SWIN_SIZE, seed=5)[0]
    got = analyze(load_checkpoint(path), x, ablate_attention=[1]).logits
    block = ref_model.layers[0].blocks[1]  # shifted, its windows padded

    def without_attention(t: Tensor) -> Tensor:  # (B, H, W, C)
        B, H, W, C = t.shape
        flat = t.reshape(B, -1, C)
        return (flat + block.norm2(block.mlp(flat))).reshape(B, H, W, C)

    with torch.no_grad():
        full = ref_model(x[None])[0]
        block.forward = without_attention
        ref = ref_model(x[None])[0]
    assert _rel(got, ref) < RTOL
    assert _rel(full, ref) > 1e-3


def test_the_attention_branch_of_a_block_of_branches(tmp_path) -> None:
    """A block of two attention branches: knocked out, both are 0, the same model with both
    branches' projections set to 0 (not the first branch alone); a head of the second branch
    knocked out in an analysis is the accessor's pass with it replaced."""
    from conftest import random_vit

    from vitviz.checkpoints import save_checkpoint

    model = random_vit(seed=5, branches=2)
    path = save_checkpoint(model, tmp_path / "a.safetensors")
    x = images(1, 32, 32, seed=2)[0]
    loaded = load_checkpoint(path)
    for head in (0, 3):  # heads 2 and 3 are the second branch's
        with torch.no_grad():
            want = loaded.kind.intermediates(loaded.model, x[None], replace={(1, head): None})
        assert _rel(analyze(loaded, x, ablate=[(1, head)]).logits, want.logits[0]) < RTOL
    got = analyze(load_checkpoint(path), x, ablate_attention=[1]).logits
    with torch.no_grad():
        for branch in model.blocks[1].attns:
            branch.attn.proj.weight.zero_()
            branch.attn.proj.bias.zero_()
    ref = analyze(load_checkpoint(save_checkpoint(model, tmp_path / "b.safetensors")), x).logits
    assert _rel(got, ref) < RTOL
    assert _rel(analyze(load_checkpoint(path), x).logits, ref) > 1e-3
