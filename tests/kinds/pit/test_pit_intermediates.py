"""The PiT kind's intermediates accessor (DESIGN §3) on a tiny perturbed timm pit_ti_distilled
opened through vitviz: every block's patches on its stage's grid and its prefix tokens equal
timm's blocks' outputs; every head's output, through the projection, is timm's attention
branch; a zeroed head is its projection's columns zeroed; a head replaced by itself changes
nothing; bad replacements are refused; the grids carry the prefix; the readout of the last
block is the model's logits; gradients reach blocks, prefixes and heads."""

from __future__ import annotations

import copy

import pytest
import torch
from pit_helpers import SIZE, save_folder, timm_blocks, tiny_timm_pit
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")

GRIDS = [(5, 5), (3, 3), (3, 3), (2, 2)]  # per block
P = 2


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    ref = tiny_timm_pit(distilled=True, seed=21)
    loaded = load_checkpoint(save_folder(ref, tmp_path_factory.mktemp("pit") / "pit"))
    x = images(2, SIZE, SIZE, seed=3)
    with torch.no_grad():
        inter = loaded.kind.intermediates(loaded.model, x)
    return ref, loaded, x, inter


def _timm_outputs(ref, x) -> tuple[list, list]:
    """timm's blocks' outputs (B, P + N, C) and attention branches (B, P + N, C)."""
    blocks, branches, handles = [], [], []
    for b in timm_blocks(ref):
        handles.append(b.register_forward_hook(lambda _m, _i, o: blocks.append(o)))
        handles.append(b.attn.register_forward_hook(lambda _m, _i, o: branches.append(o)))
    try:
        with torch.no_grad():
            ref(x)
    finally:
        for h in handles:
            h.remove()
    return blocks, branches


def test_blocks_and_prefixes_equal_timms(opened) -> None:
    ref, _, x, inter = opened
    want, _ = _timm_outputs(ref, x)
    assert len(inter.blocks) == len(want) == 4
    outputs = zip(inter.blocks, inter.block_prefix, want, strict=True)
    for b, (grid_out, prefix, w) in enumerate(outputs):
        h, wd = GRIDS[b]
        assert tuple(grid_out.shape[-2:]) == (h, wd) and prefix.shape[1] == P
        patches = w[:, P:].transpose(1, 2).reshape(w.shape[0], -1, h, wd)
        scale = float(w.abs().max())
        assert float((grid_out - patches).abs().max()) / scale < 1e-5, b
        assert float((prefix - w[:, :P]).abs().max()) / scale < 1e-5, b
        assert inter.block_grids[b].grid == (h, wd) and inter.block_grids[b].num_prefix_tokens == P


def test_heads_through_the_projection_are_the_attention_branch(opened) -> None:
    ref, _loaded, x, inter = opened
    _, want = _timm_outputs(ref, x)
    for b, (heads, proj, w) in enumerate(zip(inter.heads, inter.projections, want, strict=True)):
        B, H, N, d = heads.shape
        assert P + GRIDS[b][0] * GRIDS[b][1] == N and inter.head_grids[b].num_prefix_tokens == P
        with torch.no_grad():
            got = proj(heads.transpose(1, 2).reshape(B, N, H * d))
        assert float((got - w).abs().max()) / float(w.abs().max()) < 1e-5, b


def test_a_zeroed_head_is_its_projection_columns_zeroed(opened) -> None:
    _, loaded, x, inter = opened
    layer, head = 2, 1
    with torch.no_grad():
        got = loaded.kind.intermediates(loaded.model, x, replace={(layer, head): None}).logits
        model = copy.deepcopy(loaded.model)
        proj = model.blocks[layer].attn.proj
        d = proj.in_features // model.blocks[layer].attn.heads
        proj.weight[:, head * d : (head + 1) * d] = 0
        want = model(x)
    assert not torch.allclose(got, inter.logits)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    itself = {(3, 0): inter.heads[3][:, 0]}
    with torch.no_grad():
        same = loaded.kind.intermediates(loaded.model, x, replace=itself).logits
    assert torch.equal(same, inter.logits)


def test_bad_replacements_are_refused(opened) -> None:
    _, loaded, x, _ = opened
    for bad, words in (
        ({(4, 0): None}, "layer 4"),
        ({(3, 4): None}, "head 4"),
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
    tensors = [inter.blocks[0], inter.block_prefix[1], inter.heads[2]]
    grads = torch.autograd.grad(y, tensors)
    assert all(float(g.abs().sum()) > 0 for g in grads)
