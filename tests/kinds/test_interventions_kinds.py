"""Knocking heads out works on every kind through the intermediates accessor (DESIGN §3, §5):
ViT (with registers), CaiT, XCiT, a CLIP per prompt, Swin, and the pyramids (PVT v2, Twins-SVT,
Hiera). For each: ``head_effects`` (batched) equals one single-head pass of the accessor, and
the kind's own analysis run with that head knocked out (``analyze(..., ablate=...)``) gives
those logits, its attention changed only from the next layer on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_intermediates_token import _hf_clip, _timm_cait, _timm_vit, _timm_xcit
from test_staged_intermediates import _folder, _hiera, _pyramid, _swin

from vitviz.checkpoints import load_checkpoint
from vitviz.kindapi import OnRows
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.head_effects import head_effects, patching_effects

SIZE = 64


def _staged(name: str, root: Path):
    if name == "swin":
        return load_checkpoint(_swin(root, 1, (60, 52))[1]), (60, 52)
    model = {
        "pvt-v2": lambda: _pyramid("pvt_v2_b0", 1, depths=(1, 2, 1, 1)),
        "twins-svt": lambda: _pyramid("twins_svt_small", 4, depths=(2, 2, 1, 1), wss=(2, 2, 2, 1)),
        "hiera": _hiera,
    }[name]()
    return load_checkpoint(_folder(model, root, name, (SIZE, SIZE))), (SIZE, SIZE)


TOKEN = {"vit": _timm_vit, "cait": _timm_cait, "xcit": _timm_xcit, "clip": _hf_clip}
STAGED = ["swin", "pvt-v2", "twins-svt", "hiera"]


@pytest.fixture(scope="module", params=[*TOKEN, *STAGED])
def opened(request, tmp_path_factory):
    """(loaded model, one input (C, H, W))."""
    root = tmp_path_factory.mktemp(request.param)
    if request.param in TOKEN:
        case = TOKEN[request.param](root)
        loaded, size = case.loaded, case.size
    else:
        loaded, size = _staged(request.param, root)
    x = torch.randn(3, *size, generator=torch.Generator().manual_seed(9))
    return loaded, x


def test_head_effects_equal_a_single_head_pass(opened) -> None:
    loaded, x = opened
    kind, model = loaded.kind, loaded.model
    with torch.no_grad():
        full = kind.intermediates(model, x[None])
    classes = full.logits.shape[1]
    target = classes - 1  # a CLIP's last prompt, a classifier's last class
    effects = head_effects(loaded, x, target=target)
    L = len(full.heads)
    assert effects.effect.shape == (L, max(h.shape[1] for h in full.heads))
    for layer in {0, L - 1}:
        head = full.heads[layer].shape[1] - 1
        with torch.no_grad():
            alone = kind.intermediates(model, x[None], replace={(layer, head): None}).logits[0]
        want = float(full.logits[0, target] - alone[target])
        got = float(effects.effect[layer, head])
        assert abs(got - want) < 1e-4 * (1 + abs(want)), (layer, head, got, want)
        analysed = analyze(loaded, x, ablate=[(layer, head)])
        scale = float(alone.abs().max())
        assert float((analysed.logits - alone).abs().max()) < 1e-4 * scale
    assert float(effects.effect.nan_to_num().abs().max()) > 1e-5  # knocking out does something


def test_a_logits_only_pass_keeps_nothing_else(opened) -> None:
    """The accessor's ``logits_only`` pass (what the single-head passes ask): the same logits,
    replacements applied, and no block's or head's output kept (DESIGN §3)."""
    loaded, x = opened
    kind, model = loaded.kind, loaded.model
    with torch.no_grad():
        full = kind.intermediates(model, x[None])
        last = (len(full.heads) - 1, full.heads[-1].shape[1] - 1)
        replaced = kind.intermediates(model, x[None], replace={last: None})
        for want, replace in [(full, None), (replaced, {last: None})]:
            got = kind.intermediates(model, x[None], replace=replace, logits_only=True)
            assert torch.allclose(got.logits, want.logits, rtol=1e-6, atol=1e-6)
            assert got.blocks == got.heads == got.block_prefix == got.head_grids == ()
            assert got.projections == full.projections and got.mlps == full.mlps
    assert not torch.allclose(replaced.logits, full.logits)  # the replacement is seen


def test_a_layer_past_the_last_is_refused_in_one_line(opened) -> None:
    """A head of a layer the model lacks: one line; where some blocks' heads are no layer of the
    head grid (an XCiT's XCA blocks), the line says those can't be knocked out."""
    from vitviz.pipeline.interventions import InterventionError

    loaded, x = opened
    with torch.no_grad():
        full = loaded.kind.intermediates(loaded.model, x[None], logits_only=True)
    layers = len(full.projections)
    with pytest.raises(InterventionError) as refused:
        analyze(loaded, x, ablate=[(layers, 0)])
    line = str(refused.value)
    assert "\n" not in line and f"no layer {layers}" in line
    unread = len(full.block_modules) - layers
    assert (f"the heads of its {unread} other blocks can't be knocked out" in line) == (unread > 0)


def _one_at_a_time(loaded, x: torch.Tensor, value_of) -> dict[tuple[int, int], torch.Tensor]:
    """{(layer, head): logits (classes,)} of one accessor pass per head of ``x`` (C, H, W), the
    head replaced by ``value_of(layer, head, full)`` ((1, N, hd), None: zero)."""
    kind, model = loaded.kind, loaded.model
    got = {}
    with torch.no_grad():
        full = kind.intermediates(model, x[None])
        for layer, heads in enumerate(full.heads):
            for head in range(heads.shape[1]):
                replace = {(layer, head): value_of(layer, head, full)}
                got[(layer, head)] = kind.intermediates(model, x[None], replace=replace).logits[0]
    return got


def _spans_layers(loaded, x: torch.Tensor, batch: int) -> int:
    """How many passes of the multi-layer plan hold heads of more than one layer."""
    from vitviz.pipeline.head_effects import full_pass, pass_plan

    base, _ = full_pass(loaded.kind, loaded.model, x[None])
    plan = pass_plan(x[None], base, batch, "multi-layer")
    return sum(len({layer for layer, _ in p}) > 1 for p in plan.passes)


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_the_multi_layer_plan_gives_the_single_head_passes(opened, mode) -> None:
    """Heads of several layers in one batch (each row starts at the batch's lowest layer and
    has its own head replaced in its own row alone), forced on the CPU: every effect is its
    one-at-a-time pass's, and so is every patching effect."""
    loaded, x = opened
    with torch.no_grad():
        full = loaded.kind.intermediates(loaded.model, x[None])
    heads = [int(h.shape[1]) for h in full.heads]
    target = full.logits.shape[1] - 1

    def value(layer, head, base):
        own = base.heads[layer][:, head]  # (1, N, hd)
        return None if mode == "zero" else own.mean(dim=1, keepdim=True).expand_as(own)

    alone = _one_at_a_time(loaded, x, value)
    for batch in (3, sum(heads)):
        assert _spans_layers(loaded, x, batch) >= 1  # the plan really mixes layers
        effects = head_effects(loaded, x, target=target, mode=mode, batch=batch,
                               plan="multi-layer")  # fmt: skip
        for (layer, head), logits in alone.items():
            want = float(full.logits[0, target] - logits[target])
            got = float(effects.effect[layer, head])
            assert abs(got - want) < 1e-4 * (1 + abs(want)), (batch, layer, head, got, want)
    if mode == "mean":
        return
    clean = torch.randn(x.shape, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        a = loaded.kind.intermediates(loaded.model, clean[None])
    patched = _one_at_a_time(loaded, x, lambda layer, head, _: a.heads[layer][:, head])
    c = int(a.logits[0].argmax())
    ya, yb = float(a.logits[0, c]), float(full.logits[0, c])
    effects = patching_effects(loaded, clean, x, batch=3, plan="multi-layer")
    for (layer, head), logits in patched.items():
        want = (float(logits[c]) - yb) / (ya - yb)
        got = float(effects.effect[layer, head])
        assert abs(got - want) < 1e-3 * (1 + abs(want)), (layer, head, got, want)


def test_a_head_replaced_on_some_rows_leaves_the_others_as_they_compute(opened) -> None:
    """The accessor's ``OnRows`` (DESIGN §3): in a batch of three, rows 0 and 2 get the head's
    replacement (zero; a value), row 1 computes it: each row is its own single pass."""
    loaded, x = opened
    kind, model = loaded.kind, loaded.model
    with torch.no_grad():
        full = kind.intermediates(model, x[None])
        layer = len(full.heads) - 1 if len(full.heads) < 3 else 1
        own = full.heads[layer][:, 0]  # (1, N, hd)
        value = own.flip(1) * 2
        zeroed = kind.intermediates(model, x[None], replace={(layer, 0): None}).logits[0]
        valued = kind.intermediates(model, x[None], replace={(layer, 0): value}).logits[0]
        rows = OnRows(torch.tensor([2, 0]), torch.cat([value, own * 0]))
        got = kind.intermediates(model, x[None].expand(3, -1, -1, -1), replace={(layer, 0): rows})
    for row, want in enumerate([zeroed, full.logits[0], valued]):
        assert torch.allclose(got.logits[row], want, rtol=1e-5, atol=1e-5), row
    assert not torch.allclose(zeroed, full.logits[0], atol=1e-5)
    assert not torch.allclose(valued, zeroed, atol=1e-5)


def test_attention_and_mlp_branches_count_the_same_blocks(opened) -> None:
    """``ablate_attention=[b]`` and ``ablate_mlp=[b]`` both name the model's block b (0-based
    over its blocks): each leaves the blocks before b as they were and changes b's output. A
    block whose heads are no row of the head grid (an XCiT's XCA blocks) has its attention
    refused in one line naming the blocks that do; its MLP can be zeroed."""
    from vitviz.pipeline.interventions import HeadLayout, InterventionError, holding

    loaded, x = opened
    kind, model = loaded.kind, loaded.model
    with torch.no_grad():
        clean = kind.intermediates(model, x[None])
    layout = HeadLayout.of(clean)
    blocks = len(clean.block_modules)
    rows = [b for b in range(blocks) if b >= blocks - len(clean.heads)]  # the grid's blocks
    for b in {0, blocks - 1}:
        for branches, mlps in [([b], []), ([], [b])]:
            if branches and b not in rows:
                with pytest.raises(InterventionError) as refused:
                    analyze(loaded, x, ablate_attention=branches)
                line = str(refused.value)
                assert "\n" not in line and f"blocks {rows[0]}–{rows[-1]}" in line
                continue
            if mlps and layout.mlps[b] is None:
                continue
            with holding(layout, {}, branches, mlps), torch.no_grad():
                out = kind.intermediates(model, x[None])
            for i in range(b):
                assert torch.equal(out.blocks[i], clean.blocks[i]), (b, branches, i)
                assert torch.equal(out.block_prefix[i], clean.block_prefix[i]), (b, branches, i)
            same = torch.allclose(out.blocks[b], clean.blocks[b]) and torch.allclose(
                out.block_prefix[b], clean.block_prefix[b]
            )  # a class-attention block changes its CLS (the prefix) alone
            assert not same, (b, branches)
    with pytest.raises(InterventionError, match=f"no block {blocks}"):
        analyze(loaded, x, ablate_attention=[blocks])
