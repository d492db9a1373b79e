"""The intermediates accessor of the staged kinds (DESIGN §3) on tiny timm Swins (v1 padded and
shifted, v2), a torchvision Swin (padded before the roll), PVT v2, Twins-PCPVT, Twins-SVT and
Hiera with perturbed weights, opened through vitviz: every block's output equals the library's
(its blocks' outputs, and its ``forward_intermediates`` where that gives blocks' outputs) within
1e-5 relative; every head's output before the projection, pushed through the projection, equals
the attention branch's output put on the grid by the model's own route (Swin: ``unpartition``;
Hiera: timm's ``reroll``); a head replaced by itself changes nothing (bitwise); a zeroed head
equals zeroing its columns of the projection's weight; bad replacements are refused with
ValueError; the grids are the kind's token geometry's; gradients reach blocks and heads."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from swin_helpers import tiny_timm_swin, tiny_torchvision_swin
from torch import Tensor, nn
from zoo_helpers import randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.kindapi import OnRows, kind_of
from vitviz.kinds.pyramid.hiera_network import HieraViT
from vitviz.kinds.swin.windows import unpartition

timm = pytest.importorskip("timm")

SIZE = 64
RTOL = 1e-5


def _x(size: tuple[int, int], seed: int = 0) -> Tensor:
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(seed))


def _folder(model: nn.Module, root: Path, name: str, size: tuple[int, int]) -> Path:
    from timm.models import save_for_hf

    folder = root / name
    save_for_hf(model, folder, safe_serialization=True)
    side = {"preprocessing": {"image_size": list(size)}}
    folder.with_name(name + ".vitviz.json").write_text(json.dumps(side))
    return folder


def _swin(root: Path, version: int, size: tuple[int, int]) -> tuple[nn.Module, Path]:
    ref = tiny_timm_swin(size, window=4, version=version)
    path = root / f"swin{version}" / "model.safetensors"
    path.parent.mkdir()
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    if version == 2:  # a v2's window is in timm's config.json, not in its weights
        config = {"architecture": "swinv2_tiny_window8_256", "model_args": {"window_size": 4}}
        (path.parent / "config.json").write_text(json.dumps(config))
    return ref, path


def _pyramid(name: str, seed: int, **extra) -> nn.Module:
    model = timm.create_model(
        name, num_classes=5, embed_dims=(16, 32, 48, 64), num_heads=(1, 2, 2, 4),
        mlp_ratios=(2, 2, 2, 2), **extra,
    )  # fmt: skip
    return randomize_(model, seed=seed)


def _hiera() -> nn.Module:
    model = timm.create_model(
        "hiera_tiny_224", img_size=SIZE, embed_dim=16, num_heads=1, stages=(1, 2, 1, 1),
        num_classes=5,
    )  # fmt: skip
    return randomize_(model, seed=3)


CASES = {
    "swin-v1-padded": ("swin", (60, 52)),  # 15×13 tokens: padded to whole windows, shifted
    "swin-torchvision-padded": ("swin", (60, 52)),  # padded, then rolled (timm: the other way)
    "swin-v2": ("swin2", (SIZE, SIZE)),
    "pvt-v2": ("pvt", (SIZE, SIZE)),
    "twins-pcpvt": ("pcpvt", (SIZE, SIZE)),
    "twins-svt": ("svt", (SIZE, SIZE)),
    "hiera": ("hiera", (SIZE, SIZE)),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, tuple[nn.Module, nn.Module]]:
    """{case: (timm model, vitviz's model opened from its files)}."""
    root = tmp_path_factory.mktemp("staged")
    refs: dict[str, tuple[nn.Module, Path]] = {
        "swin-v1-padded": _swin(root, 1, (60, 52)),
        "swin-v2": _swin(root, 2, (SIZE, SIZE)),
    }
    tv = tiny_torchvision_swin(window=4, seed=5)
    torch.save(tv.state_dict(), root / "swin_t_tiny.pth")
    refs["swin-torchvision-padded"] = (tv, root / "swin_t_tiny.pth")
    pyramids = {
        "pvt-v2": _pyramid("pvt_v2_b0", 1, depths=(1, 2, 1, 1)),
        "twins-pcpvt": _pyramid("twins_pcpvt_small", 2, depths=(2, 2, 1, 1)),
        "twins-svt": _pyramid("twins_svt_small", 4, depths=(2, 2, 1, 1), wss=(2, 2, 2, 1)),
        "hiera": _hiera(),
    }
    for name, ref in pyramids.items():
        refs[name] = (ref, _folder(ref, root, name, (SIZE, SIZE)))
    out = {}
    for name, (ref, path) in refs.items():
        out[name] = (ref.eval(), load_checkpoint(path).model.eval())
    return out


@pytest.fixture(scope="module")
def passes(models) -> dict[str, tuple[Tensor, object]]:
    """{case: (input, its Intermediates)}."""
    out = {}
    for name, (_, model) in models.items():
        x = _x(CASES[name][1])
        with torch.no_grad():
            out[name] = (x, kind_of(model).intermediates(model, x))
    return out


def _rel(got: Tensor, ref: Tensor) -> float:
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-12))


def library_blocks(name: str, ref: nn.Module, x: Tensor) -> list[Tensor]:
    """Every block's output (B, C, h, w) as timm computes it (its blocks' outputs; Hiera's
    from ``forward_intermediates``, rerolled to the grid by timm)."""
    if name == "hiera":
        with torch.no_grad():
            return list(ref.forward_intermediates(x, coarse=False, intermediates_only=True))
    if name == "swin-torchvision-padded":
        from torchvision.models.swin_transformer import SwinTransformerBlock

        blocks = [m for m in ref.modules() if isinstance(m, SwinTransformerBlock)]
    elif name.startswith("swin"):
        blocks = [b for stage in ref.layers for b in stage.blocks]
    elif name == "pvt-v2":
        blocks = [b for stage in ref.stages for b in stage.blocks]
    else:  # Twins
        blocks = [b for stage in ref.blocks for b in stage]
    seen: list[Tensor] = []

    def keep(_m: nn.Module, args: tuple, output: Tensor) -> None:
        if output.ndim == 4:  # a Swin's (B, H, W, C)
            seen.append(output.permute(0, 3, 1, 2))
        else:  # (B, N, C) row-major over the grid args[1]
            seen.append(output.transpose(1, 2).reshape(x.shape[0], -1, *args[1]))

    handles = [b.register_forward_hook(keep) for b in blocks]
    try:
        with torch.no_grad():
            ref(x)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("name", list(CASES))
def test_blocks_equal_the_library(models, passes, name) -> None:
    ref, _ = models[name]
    x, out = passes[name]
    theirs = library_blocks(name, ref, x)
    assert len(out.blocks) == len(theirs) == len(out.block_prefix) == len(out.block_grids)
    for b, (got, want) in enumerate(zip(out.blocks, theirs, strict=True)):
        assert got.shape == want.shape, f"block {b}"
        assert _rel(got, want) <= RTOL, f"block {b}: {_rel(got, want):.2e}"
        assert out.block_prefix[b].shape == (x.shape[0], 0, got.shape[1])
        assert out.block_grids[b].grid == tuple(got.shape[-2:])
    with torch.no_grad():
        ref_logits = ref(x)
    assert _rel(out.logits, ref_logits) <= 1e-4
    if name in ("swin-v1-padded", "swin-v2"):  # timm's forward_intermediates: stages' last blocks
        with torch.no_grad():
            stage_ends = ref.forward_intermediates(x, intermediates_only=True)
        last = np.cumsum([len(s.blocks) for s in ref.layers]) - 1
        for s, want in enumerate(stage_ends):
            assert _rel(out.blocks[last[s]], want) <= RTOL, f"stage {s}"


def _attention_branches(name: str, ref: nn.Module, model: nn.Module, x: Tensor) -> list[Tensor]:
    """Each attention module's output (after its projection), (B, N, C) row-major over its
    grid: a Swin's windows through the model's own ``unpartition`` with the layout its block
    reports, a Hiera's unrolled tokens through timm's ``reroll``; the others' are row-major as
    they come."""
    branches: list[Tensor] = []
    layouts: list = []
    blocks = list(model.blocks)
    handles = [
        b.attn.register_forward_hook(lambda _m, _a, o: branches.append(o[0])) for b in blocks
    ]
    if name.startswith("swin"):  # a Swin block gives (x, attention, layout)
        handles += [b.register_forward_hook(lambda _m, _a, o: layouts.append(o[2])) for b in blocks]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    out = []
    for b, y in enumerate(branches):
        if name.startswith("swin"):  # (B, windows, n, C)
            out.append(unpartition(y, layouts[b]).reshape(y.shape[0], -1, y.shape[-1]))
        elif name == "hiera":
            out.append(ref.reroll(y, b).flatten(1, 2))
        else:
            out.append(y)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_heads_through_the_projection_are_the_attention_branch(models, passes, name) -> None:
    ref, model = models[name]
    x, out = passes[name]
    branches = _attention_branches(name, ref, model, x)
    assert len(out.heads) == len(branches) == len(list(model.blocks))
    rows = kind_of(model).parameter_bounds(model)
    assert rows[0] == len(out.heads)
    for b, (heads, block, want) in enumerate(zip(out.heads, model.blocks, branches, strict=True)):
        B, h, N, d = heads.shape
        gh, gw = out.head_grids[b].grid
        assert h == block.attn.heads and gh * gw == N, f"layer {b}"
        with torch.no_grad():
            got = block.attn.proj(heads.transpose(1, 2).reshape(B, N, h * d))
        assert got.shape == want.shape, f"layer {b}"
        assert _rel(got, want) <= RTOL, f"layer {b}: {_rel(got, want):.2e}"


@pytest.mark.parametrize("name", list(CASES))
def test_grids_are_the_kinds_token_geometry(models, passes, name) -> None:
    from vitviz.kinds.pyramid.analysis import analyze_pyramid
    from vitviz.kinds.swin.analysis import analyze_swin

    _, model = models[name]
    x, out = passes[name]
    kind = kind_of(model)
    analyse = analyze_swin if kind.name == "swin" else analyze_pyramid
    layers = kind.token_geometry(analyse(model, x[:1])).layers
    assert len(layers) == len(out.head_grids) == len(kind.layer_rows(analyse(model, x[:1])))
    for b, (got, want) in enumerate(zip(out.head_grids, layers, strict=True)):
        assert got == want, f"layer {b}"
        if want.windows is None:
            assert got.windows is None, f"layer {b}"
        else:
            assert np.array_equal(got.windows, want.windows), f"layer {b}"
    assert out.block_grids == out.head_grids


# layers whose heads are replaced: a Swin's shifted blocks, a Twins-SVT's windowed one, a
# Hiera's mask-unit and pooling blocks, each network's last
REPLACED = {
    "swin-v1-padded": (1, 3),
    "swin-v2": (1, 2),
    "swin-torchvision-padded": (1, 3),
    "pvt-v2": (0, 2, 4),
    "twins-pcpvt": (1, 2),
    "twins-svt": (0, 2, 5),
    "hiera": (0, 1, 3, 4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_head_replaced_by_itself_changes_nothing(models, passes, name) -> None:
    _, model = models[name]
    x, out = passes[name]
    replace = {(b, h): out.heads[b][:, h].clone() for b in REPLACED[name] for h in (0, -1)}
    replace = {(b, h % out.heads[b].shape[1]): v for (b, h), v in replace.items()}
    with torch.no_grad():
        again = kind_of(model).intermediates(model, x, replace=replace)
    assert again.replaced == tuple(sorted(replace))
    assert torch.equal(again.logits, out.logits)
    for got, want in zip(again.blocks, out.blocks, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("name", list(CASES))
def test_a_zeroed_head_is_its_projection_columns_zeroed(models, passes, name) -> None:
    _, model = models[name]
    x, out = passes[name]
    kind = kind_of(model)
    for b in REPLACED[name]:
        h = out.heads[b].shape[1] - 1
        d = out.heads[b].shape[-1]
        by_hand = copy.deepcopy(model)
        with torch.no_grad():
            list(by_hand.blocks)[b].attn.proj.weight[:, h * d : (h + 1) * d] = 0
            want = by_hand(x)
            got = kind.intermediates(model, x, replace={(b, h): None})
        assert not torch.allclose(want, out.logits, atol=1e-4), f"layer {b}: ablation is void"
        assert _rel(got.logits, want) <= 1e-5, f"layer {b}: {_rel(got.logits, want):.2e}"
        assert torch.count_nonzero(got.heads[b][:, h]) == 0
        assert torch.equal(got.heads[b][:, :h], out.heads[b][:, :h])


@pytest.mark.parametrize("name", ["swin-v1-padded", "hiera", "twins-svt"])
def test_bad_replacements_are_refused(models, passes, name) -> None:
    _, model = models[name]
    x, out = passes[name]
    kind = kind_of(model)
    L, heads = len(out.heads), out.heads[-1].shape[1]
    B, _, N, d = out.heads[-1].shape
    bad = {
        "layer 5 is out of range" if L == 5 else f"layer {L} is out of range": {(L, 0): None},
        "layer -1 is out of range": {(-1, 0): None},
        f"head {heads} is out of range": {(L - 1, heads): None},
        "key is \\(layer, head\\)": {(0,): None},
        "must be None \\(zero it\\) or a tensor": {(0, 0): 0.0},
        "that head's output is": {(L - 1, 0): torch.zeros(B, N - 1, d)},
        "that head's output is ": {(L - 1, 0): torch.zeros(B + 1, N, d)},
        "that head's output is  ": {(L - 1, 0): torch.zeros(B, N, d + 1)},
        "rows \\(R,\\) of a batch": {(L - 1, 0): OnRows(torch.tensor([B]))},
        "\\(R, N, head_dim\\)": {(L - 1, 0): OnRows(torch.tensor([0]), torch.zeros(1, N, d + 1))},
    }
    for message, replace in bad.items():
        with pytest.raises(ValueError, match=message.strip()), torch.no_grad():
            kind.intermediates(model, x, replace=replace)
    with torch.no_grad():  # the hooks went with the refused pass
        assert torch.equal(kind.intermediates(model, x).logits, out.logits)


def test_another_network_is_refused(models) -> None:
    _, swin = models["swin-v1-padded"]
    _, hiera = models["hiera"]
    x = _x((SIZE, SIZE))
    with pytest.raises(ValueError, match="needs vitviz's SwinTransformer"):
        kind_of(swin).intermediates(nn.Linear(3, 3), x)
    with pytest.raises(ValueError, match="needs vitviz's PyramidViT or HieraViT"):
        kind_of(hiera).intermediates(swin, x)
    with pytest.raises(ValueError, match="takes a batch"):
        kind_of(hiera).intermediates(hiera, x[0])
    assert isinstance(hiera, HieraViT)


def test_headless_networks_give_no_logits_and_gradients_reach_the_blocks() -> None:
    """Without a head the logits are (B, 0), not the pooled features; with gradients enabled
    the blocks and heads stay in the graph (what a target layer of the CAM family needs)."""
    from vitviz.kinds.pyramid.hiera_config import HieraConfig
    from vitviz.kinds.swin.config import SwinConfig
    from vitviz.kinds.swin.network import SwinTransformer

    torch.manual_seed(0)
    swin = SwinTransformer(
        SwinConfig(
            image_size=(32, 32), num_classes=0, dims=(16, 32), depths=(2, 2), heads=(2, 4),
            window_sizes=(4, 4),
        )
    ).eval()  # fmt: skip
    hiera = HieraViT(
        HieraConfig(
            image_size=(32, 32), num_classes=0, dims=(16, 32), depths=(1, 1), heads=(1, 2),
            mlp_hidden_dims=(32, 64), mask_unit_attn=(True, False), mask_unit=(2, 2),
        )
    ).eval()  # fmt: skip
    x = _x((32, 32))
    for model in (swin, hiera):
        out = kind_of(model).intermediates(model, x)
        assert out.logits.shape == (2, 0)
        features = out.blocks[-1].mean(dim=(2, 3)).sum()
        grads = torch.autograd.grad(features, [out.blocks[0], out.heads[0]])
        assert all(float(g.abs().sum()) > 0 for g in grads)
