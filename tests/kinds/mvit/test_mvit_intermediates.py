"""The MViTv2 kind's intermediates accessor (DESIGN §3) on a tiny perturbed timm MViTv2 with a
CLS token opened through vitviz: every block's patches on its query grid and its CLS equal
timm's blocks' outputs; every head's output is softmax(q·kᵀ + bias)·v plus the pooled queries
(residual pooling, DESIGN §5), read from timm's own pooled q and v, and through the projection
is timm's attention branch; a zeroed head is its projection's columns zeroed; a head replaced
by itself changes nothing; bad replacements are refused; the readout of the last block is the
model's logits; gradients reach blocks, the CLS and heads."""

from __future__ import annotations

import copy

import pytest
import torch
from mvit_helpers import SIZE, Softmaxes, save_bare, tiny_timm_mvit
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")

GRIDS = [(16, 16), (8, 8), (8, 8), (4, 4), (2, 2)]  # per block: its queries'
P = 1


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    ref = tiny_timm_mvit(cls=True, seed=21)
    loaded = load_checkpoint(save_bare(ref, tmp_path_factory.mktemp("mvit") / "mvit.pth"))
    x = images(2, SIZE, SIZE, seed=3)
    with torch.no_grad():
        inter = loaded.kind.intermediates(loaded.model, x)
    return ref, loaded, x, inter


def _blocks(ref) -> list:
    return [b for s in ref.stages for b in s.blocks]


def _timm_run(ref, x) -> dict[str, list]:
    """timm's blocks' outputs, attention branches, probabilities, pooled q and v."""
    got: dict[str, list] = {k: [] for k in ("block", "branch", "q", "v")}
    handles = []
    for b in _blocks(ref):
        handles.append(b.register_forward_hook(lambda _m, _i, o: got["block"].append(o[0])))
        handles.append(b.attn.register_forward_hook(lambda _m, _i, o: got["branch"].append(o[0])))
        handles.append(b.attn.norm_q.register_forward_hook(lambda _m, _i, o: got["q"].append(o)))
        handles.append(b.attn.norm_v.register_forward_hook(lambda _m, _i, o: got["v"].append(o)))
    try:
        with torch.no_grad(), Softmaxes() as mode:
            ref(x)
    finally:
        for h in handles:
            h.remove()
    got["attn"] = mode.out
    return got


def test_blocks_and_the_cls_equal_timms(opened) -> None:
    ref, _, x, inter = opened
    want = _timm_run(ref, x)["block"]
    assert len(inter.blocks) == len(want) == 5
    for b, (grid_out, prefix, w) in enumerate(
        zip(inter.blocks, inter.block_prefix, want, strict=True)
    ):
        h, wd = GRIDS[b]
        assert tuple(grid_out.shape[-2:]) == (h, wd) and prefix.shape[1] == P
        patches = w[:, P:].transpose(1, 2).reshape(w.shape[0], -1, h, wd)
        scale = float(w.abs().max())
        assert float((grid_out - patches).abs().max()) / scale < 1e-5, b
        assert float((prefix - w[:, :P]).abs().max()) / scale < 1e-5, b
        assert inter.block_grids[b].grid == (h, wd) and inter.block_grids[b].num_prefix_tokens == P


def test_a_head_is_its_attention_times_v_plus_its_pooled_queries(opened) -> None:
    ref, _, x, inter = opened
    run = _timm_run(ref, x)
    for b, heads in enumerate(inter.heads):
        want = run["attn"][b] @ run["v"][b] + run["q"][b]  # (B, heads, P + Nq, d)
        assert heads.shape == want.shape and heads.shape[2] == P + GRIDS[b][0] * GRIDS[b][1]
        assert float((heads - want).abs().max()) / float(want.abs().max()) < 1e-5, b
        without = run["attn"][b] @ run["v"][b]
        assert float((heads - without).abs().max()) > 1e-2  # the pooled queries are in it


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
    layer, head = 3, 2
    with torch.no_grad():
        got = loaded.kind.intermediates(loaded.model, x, replace={(layer, head): None}).logits
        model = copy.deepcopy(loaded.model)
        proj = model.blocks[layer].attn.proj
        d = proj.in_features // model.blocks[layer].attn.heads
        proj.weight[:, head * d : (head + 1) * d] = 0
        want = model(x)
    assert not torch.allclose(got, inter.logits)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    itself = {(4, 0): inter.heads[4][:, 0]}
    with torch.no_grad():
        same = loaded.kind.intermediates(loaded.model, x, replace=itself).logits
    assert torch.equal(same, inter.logits)


def test_bad_replacements_are_refused(opened) -> None:
    _, loaded, x, _ = opened
    for bad, words in (
        ({(5, 0): None}, "layer 5"),
        ({(4, 8): None}, "head 8"),
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
