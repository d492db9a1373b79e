"""The TNT kind's intermediates accessor (DESIGN §3) on a tiny perturbed timm TNT opened through
vitviz: every block's patch tokens on the patch grid and its CLS equal timm's blocks' outputs;
every outer head's output is softmax(q·kᵀ / √d)·v, read from timm's own outer attention and v,
and through the projection is timm's outer attention branch; a zeroed head is its projection's
columns zeroed; a head replaced by itself changes nothing; bad replacements are refused; the
readout of the last block is the model's logits; gradients reach blocks, the CLS and heads."""

from __future__ import annotations

import copy

import pytest
import torch
from tnt_helpers import SETTINGS, SIZE, Softmaxes, save_bare, tiny_timm_tnt
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")

GRID, HEADS, D = (4, 4), 4, 8


@pytest.fixture(scope="module", params=[False, True], ids=["current", "legacy"])
def opened(request, tmp_path_factory):
    ref = tiny_timm_tnt(legacy=request.param, seed=21)
    path = tmp_path_factory.mktemp("tnt") / "tnt.pth"
    loaded = load_checkpoint(save_bare(ref, path, SETTINGS))
    x = images(2, SIZE, SIZE, seed=3)
    with torch.no_grad():
        inter = loaded.kind.intermediates(loaded.model, x)
    return ref, loaded, x, inter


def _timm_run(ref, x) -> dict[str, list]:
    """timm's blocks' patch tokens, outer attention branches, outer probabilities and v."""
    got: dict[str, list] = {k: [] for k in ("block", "branch", "v")}
    handles = []
    for b in ref.blocks:
        handles.append(b.register_forward_hook(lambda _m, _i, o: got["block"].append(o[1])))
        handles.append(b.attn_out.register_forward_hook(lambda _m, _i, o: got["branch"].append(o)))
        handles.append(b.attn_out.v.register_forward_hook(lambda _m, _i, o: got["v"].append(o)))
    try:
        with torch.no_grad(), Softmaxes() as mode:
            ref(x)
    finally:
        for h in handles:
            h.remove()
    got["attn"] = mode.out[1::2]
    return got


def test_blocks_and_the_cls_equal_timms(opened) -> None:
    ref, _, x, inter = opened
    want = _timm_run(ref, x)["block"]
    assert len(inter.blocks) == len(want) == 2
    for b, (grid_out, prefix, w) in enumerate(
        zip(inter.blocks, inter.block_prefix, want, strict=True)
    ):
        assert tuple(grid_out.shape) == (2, 32, *GRID) and prefix.shape[1] == 1
        patches = w[:, 1:].transpose(1, 2).reshape(2, -1, *GRID)
        scale = float(w.abs().max())
        assert float((grid_out - patches).abs().max()) / scale < 1e-5, b
        assert float((prefix - w[:, :1]).abs().max()) / scale < 1e-5, b
        assert inter.block_grids[b].grid == GRID and inter.block_grids[b].token_pixels == 8


def test_a_head_is_its_outer_attention_times_v(opened) -> None:
    ref, _, x, inter = opened
    run = _timm_run(ref, x)
    for b, heads in enumerate(inter.heads):
        v = run["v"][b].reshape(2, 17, HEADS, D).transpose(1, 2)
        want = run["attn"][b] @ v  # (B, heads, 1 + N, d)
        assert heads.shape == want.shape == (2, HEADS, 17, D)
        assert float((heads - want).abs().max()) / float(want.abs().max()) < 1e-5, b


def test_heads_through_the_projection_are_the_attention_branch(opened) -> None:
    ref, _, x, inter = opened
    want = _timm_run(ref, x)["branch"]
    for b, (heads, proj, w) in enumerate(zip(inter.heads, inter.projections, want, strict=True)):
        B, H, N, d = heads.shape
        with torch.no_grad():
            got = proj(heads.transpose(1, 2).reshape(B, N, H * d))
        assert float((got - w).abs().max()) / float(w.abs().max()) < 1e-5, b


def test_a_zeroed_head_is_its_projection_columns_zeroed(opened) -> None:
    _, loaded, x, inter = opened
    layer, head = 1, 2
    with torch.no_grad():
        got = loaded.kind.intermediates(loaded.model, x, replace={(layer, head): None}).logits
        model = copy.deepcopy(loaded.model)
        proj = model.blocks[layer].attn_out.proj
        proj.weight[:, head * D : (head + 1) * D] = 0
        want = model(x)
    assert not torch.allclose(got, inter.logits)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    itself = {(0, 3): inter.heads[0][:, 3]}
    with torch.no_grad():
        same = loaded.kind.intermediates(loaded.model, x, replace=itself).logits
    assert torch.equal(same, inter.logits)


def test_bad_replacements_are_refused(opened) -> None:
    _, loaded, x, _ = opened
    for bad, words in (
        ({(2, 0): None}, "layer 2"),
        ({(1, 4): None}, "head 4"),
        ({(0, 0): torch.zeros(2, 5, 8)}, "replacement"),
        ({(0, 0): 1.0}, "tensor"),
    ):
        with pytest.raises(ValueError, match=words):
            loaded.kind.intermediates(loaded.model, x, replace=bad)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in loaded.model.modules())


def test_the_readout_of_the_last_block_is_the_logits_and_gradients_flow(opened) -> None:
    _, loaded, x, _ = opened
    inter = loaded.kind.intermediates(loaded.model, x)
    readout = loaded.kind.readout(loaded.model)
    patches = inter.blocks[-1].flatten(2).transpose(1, 2)
    torch.testing.assert_close(readout.logits(inter.block_prefix[-1], patches), inter.logits)
    y = inter.logits[:, 0].sum()
    tensors = [inter.blocks[0], inter.block_prefix[0], inter.heads[1]]
    grads = torch.autograd.grad(y, tensors)
    assert all(float(g.abs().sum()) > 0 for g in grads)
