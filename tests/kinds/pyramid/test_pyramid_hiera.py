"""The pyramid kind on timm's Hiera, against timm's eager forward on random perturbed weights:
logits within 1e-4 relative (fused and capture paths), every block's attention within 1e-5 in
timm's own layout (mask units, unrolled order; timm's probabilities taken by the load-time
check's hook on its ``qkv``), bare and as timm's folder; the unrolled order against timm's own
``Unroll``; rollout, gradient rollout and relevance equal float64 references written from the
definition (a pooling block's residual spread evenly over its 2 × 2 tokens); `vitviz-cli
explain` writes the shared npz keys."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from pyramid_chains import chain_definitions, maps_and_references
from zoo_helpers import max_diff, randomize_

from vitviz import cli
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.kinds.pyramid.analysis import analyze_pyramid
from vitviz.kinds.pyramid.families.timm_hiera import LIBRARY_MODEL
from vitviz.kinds.pyramid.hiera_config import HieraConfig
from vitviz.kinds.pyramid.hiera_network import HieraViT, unrolled_order

timm = pytest.importorskip("timm")

SIZE = 64


def _pair(stages: tuple[int, ...], abswin: bool) -> tuple[torch.nn.Module, HieraViT]:
    extra = {}
    if abswin:  # as hiera_small_abswin_256: layer scale, the width doubled by [max, mean]
        extra = dict(
            abs_win_pos_embed=True, global_pos_size=(4, 4), init_values=1e-5, use_expand_proj=False
        )
    theirs = timm.create_model(
        "hiera_tiny_224", img_size=SIZE, embed_dim=16, num_heads=1, stages=stages,
        num_classes=5, **extra,
    )  # fmt: skip
    randomize_(theirs, seed=len(stages) + sum(stages))
    cfg = HieraConfig(
        image_size=(SIZE, SIZE), num_classes=5, dims=(16, 32, 64, 128), depths=stages,
        heads=(1, 2, 4, 8), mlp_hidden_dims=(64, 128, 256, 512), abs_win_pos=abswin,
        global_pos_size=(4, 4), layer_scale=abswin, expand_proj=not abswin,
    )  # fmt: skip
    mine = HieraViT(cfg).eval()
    mine.load_state_dict(theirs.state_dict(), strict=True)
    return theirs, mine


@pytest.mark.parametrize(
    ("stages", "abswin"), [((1, 2, 1, 1), False), ((1, 1, 2, 1), True)], ids=["rel", "abswin"]
)
def test_logits_and_attention_exact(stages, abswin) -> None:
    theirs, mine = _pair(stages, abswin)
    x = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    ref_logits, ref_attn = LIBRARY_MODEL.read(theirs, x)
    with torch.no_grad():
        fused = mine(x)
        out = mine.forward_explained(x)
    scale = float(ref_logits.abs().max())
    assert max_diff(fused, ref_logits) / scale <= 1e-4
    assert max_diff(out.logits, ref_logits) / scale <= 1e-4
    assert len(ref_attn) == len(out.attentions) == sum(stages)
    assert [a.shape for a in out.attentions] == [a.shape for a in ref_attn]
    assert max(max_diff(a, b) for a, b in zip(out.attentions, ref_attn, strict=True)) <= 1e-5
    # over the grids: each row a probability over the keys of the query's own mask unit
    grid0 = (SIZE // 4, SIZE // 4)
    first = mine.grid_attention(0, out.attentions[0], grid0)[0, 0]  # (256, 256)
    assert torch.allclose(first.sum(-1), torch.ones(256), atol=1e-5)
    unit = (torch.arange(16)[:, None] // 8 * 2 + torch.arange(16)[None, :] // 8).reshape(-1)
    assert torch.equal(first > 0, unit[:, None] == unit[None, :])
    pooled = mine.grid_attention(stages[0], out.attentions[stages[0]], grid0)[0, 0]  # (64, 256)
    unit8 = (torch.arange(8)[:, None] // 4 * 2 + torch.arange(8)[None, :] // 4).reshape(-1)
    assert torch.equal(pooled > 0, unit8[:, None] == unit[None, :])
    last = mine.grid_attention(len(ref_attn) - 1, out.attentions[-1], grid0)
    # the last block pools: its queries are row-major already, its keys one unroll from it
    keys = unrolled_order((4, 4), (2, 2), 1)
    assert torch.equal(last[..., keys], out.attentions[-1]) and not torch.equal(
        keys, keys.sort()[0]
    )
    assert out.stage_grids == [(16, 16), (8, 8), (4, 4), (2, 2)]


def test_unrolled_order_is_timms() -> None:
    theirs, _ = _pair((1, 1, 1, 1), False)
    grid = torch.arange(16 * 16, dtype=torch.float32).reshape(1, 256, 1)
    theirs_order = theirs.unroll(grid).reshape(-1).long()
    assert torch.equal(unrolled_order((16, 16), (2, 2), 3), theirs_order)
    assert not torch.equal(theirs_order, torch.arange(256))


# -- as a checkpoint: timm's folder and a bare state dict ----------------------------------------


def _x(seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(timm model, bare path, folder path) of a tiny random timm Hiera (abswin: no)."""
    from timm.models import save_for_hf

    theirs, _ = _pair((1, 2, 1, 1), False)
    root = tmp_path_factory.mktemp("hiera")
    bare = root / "hiera.pth"
    torch.save(theirs.state_dict(), bare)
    settings = {"stage_heads": [1, 2, 4, 8], "preprocessing": {"image_size": [SIZE, SIZE]}}
    bare.with_name(bare.name + ".vitviz.json").write_text(json.dumps(settings))
    folder = root / "hiera_folder"
    save_for_hf(theirs, folder, safe_serialization=True)
    side = {"preprocessing": {"image_size": [SIZE, SIZE]}}
    folder.with_name(folder.name + ".vitviz.json").write_text(json.dumps(side))
    return theirs, bare, folder


@pytest.mark.parametrize("form", ["bare", "folder"])
def test_checkpoint_exact(saved, form) -> None:
    theirs, bare, folder = saved
    loaded = load_checkpoint(bare if form == "bare" else folder)
    assert kind_of(loaded).name == "pyramid" and loaded.family == "timm-hiera"
    assert isinstance(loaded.model, HieraViT) and loaded.model.config.heads == (1, 2, 4, 8)
    x = _x()
    ref_logits, ref_attn = LIBRARY_MODEL.read(theirs, x)
    with torch.no_grad():
        logits, attn = kind_of(loaded).library_outputs(loaded.model, x)
    assert max_diff(logits, ref_logits) / float(ref_logits.abs().max()) <= 1e-4
    assert max(max_diff(a, b) for a, b in zip(attn, ref_attn, strict=True)) <= 1e-5
    if form == "folder":
        assert any("checked against timm" in n for n in loaded.notes), loaded.notes
    with pytest.raises(CheckpointError, match="stage_heads"):
        bare.with_name(bare.name + ".vitviz.json").rename(bare.with_name("aside.json"))
        try:
            load_checkpoint(bare)
        finally:
            bare.with_name("aside.json").rename(bare.with_name(bare.name + ".vitviz.json"))


def test_wrong_heads_refused_by_the_library_check(saved, tmp_path) -> None:
    from timm.models import save_for_hf

    folder = tmp_path / "f"
    save_for_hf(saved[0], folder, safe_serialization=True)
    folder.with_name("f.vitviz.json").write_text('{"stage_heads": [1, 1, 1, 1]}')
    with pytest.raises(CheckpointError, match="differs from timm"):
        load_checkpoint(folder)


# -- the rollout's definition, from scratch in float64 -------------------------------------------


def _pool_spread(coarse: tuple[int, int]) -> np.ndarray:
    """R (N_s × N_{s−1}): a pooled token spreads its weight evenly over its 2 × 2 tokens."""
    h, w = coarse
    R = np.zeros((h * w, 4 * h * w))
    for i in range(h):
        for j in range(w):
            for dy in (0, 1):
                for dx in (0, 1):
                    R[i * w + j, (2 * i + dy) * (2 * w) + 2 * j + dx] = 0.25
    return R


def _reference_row(mats, pools, grids_out, mode, start) -> np.ndarray:
    r = start
    for b in reversed(range(len(mats))):
        n_out = mats[b].shape[0]
        R = _pool_spread(grids_out[b]) if pools[b] else np.eye(n_out)
        if mode == "rollout":
            full = mats[b] + R
            r = r @ (full / full.sum(axis=1, keepdims=True))
        else:
            r = r @ (R + mats[b])
    return r


def test_rollout_relevance_and_attention_equal_their_definitions(saved) -> None:
    _, bare, _ = saved
    loaded = load_checkpoint(bare)
    a = analyze_pyramid(loaded, _x(1)[0], gradients=True)
    assert a.stage_grids == [(16, 16), (8, 8), (4, 4), (2, 2)]
    A = [t.double().numpy() for t in a.attentions]
    G = [t.double().numpy() for t in a.gradients]
    assert A[1].shape == (2, 64, 256)  # stage 2's first block: 8×8 pooled queries, 16×16 keys
    grids_out = [a.stage_grids[s] for s in a.block_stages]
    pools = [b > 0 and a.block_stages[b] != a.block_stages[b - 1] for b in range(len(A))]
    last = a.stage_grids[-1][0] * a.stage_grids[-1][1]
    starts = ((None, np.full(last, 1.0 / last)), ((9, 4), np.eye(last)[1 * 2 + 0]))
    checked = 0
    for name, query, got, expected in maps_and_references(
        a,
        chain_definitions(A, G),
        starts,
        lambda mats, mode, start: _reference_row(mats, pools, grids_out, mode, start),
        (16, 16),
    ):
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=f"{name} {query}")
        checked += 1
    assert checked == 3 * 2
    # the attention map of a pooling block is its query's row over the previous stage's grid
    got = get_method("attention")(a, (9, 4), None, {"layer": 1, "head": 0}).numpy()
    np.testing.assert_allclose(got, A[1][0, (36 // 8) * 8 + 16 // 8].reshape(16, 16), atol=1e-6)
    geo = kind_of(a).token_geometry(a)
    assert geo.layers[0].windows is not None and geo.layers[-1].windows is None
    assert int(geo.layers[0].windows.max()) == 3  # 2 × 2 mask units
    why = get_method("transformer-attribution").unavailable(a)
    assert why is not None and "Hiera" in why
    stats = kind_of(a).head_statistics(a)
    assert stats["distance"].shape == (5, 8) and np.isfinite(stats["distance"][1, :2]).all()
    # a pooling block's queries on their own (coarser) grid: query (0, 0) of stage 2 (centre
    # (4, 4) px) to key (0, 0) of stage 1 (centre (2, 2) px), the mean over its 64 queries
    from vitviz.kinds.pyramid.stats import block_statistics

    one = torch.zeros(1, 64, 256, dtype=torch.float64)
    one[0, 0, 0] = 1.0
    d, _ = block_statistics(one, a.keys[1], 4, ((8, 8), 8))
    assert abs(float(d[0]) - 8**0.5 / 64) < 1e-12


def test_cli_explain_writes_the_shared_keys(saved, photo_files, tmp_path, capsys) -> None:
    _, _, folder = saved
    image = photo_files["chelsea"]
    out = tmp_path / "out"
    code = cli.main(
        ["explain", str(image), "--checkpoint", str(folder), "--out", str(out),
         "--method", "gradcam", "attention"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    with np.load(out / f"{image.stem}.npz") as npz:
        got = {k: npz[k] for k in npz.files}
    shared = {"kind", "input", "logits", "probs", "class_names", "rollout", "gradient_rollout"}
    assert shared | {"relevance", "target_class", "stage_grids", "map_gradcam"} <= set(got)
    assert str(got["kind"]) == "pyramid"
    np.testing.assert_array_equal(got["stage_grids"], [[16, 16], [8, 8], [4, 4], [2, 2]])
    assert got["attention_1_0"].shape == (2, 64, 256)
    assert (out / f"{image.stem}_rollout.png").is_file()
