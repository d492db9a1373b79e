"""timm's Perception Encoder core models (``vit_pe_core_*``): an Eva (rotary attention,
norm_pre, no patch bias) whose head is an attention pool (MAP, AttentionPoolLatent) over every
token, prefix included, with its own head count (8, not the blocks') and its own MLP ratio.
Logits and attention against timm's eager forward as timm's folder and as bare state dicts
(named with ``arch``, or recognised by a real model's tensors; a tiny unnamed one is refused
naming ``--arch``); the maps without a query start from the probe's row (rollout, gradient
rollout, relevance against float64 references from their definitions, test_zoo_pooling's); a
probe whose heads are not the layers' fills their slots with its mean, and a head subset can't
start a rollout from it."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from test_zoo_pooling import _reference
from timm.models import save_for_hf
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_attribution_offered,
    assert_close,
    assert_probe_maps,
    images,
    ours,
    randomize_,
)
from zoo_helpers import timm_reference as reference

from vitviz.blocks import ViTConfig
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.errors import MissingSettingsError
from vitviz.kindapi import kind_of
from vitviz.kinds.vit import engine_data
from vitviz.pipeline.analysis import analyze

NAME = "vit_pe_core_tiny_patch16_384"
TINY = dict(pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
            num_classes=3)  # fmt: skip
CASES = {  # id: (model_args beyond TINY, the pool's heads, its MLP width (None: the blocks'))
    "pe-core": ({}, 8, None),  # timm's: 8 pool heads, the blocks 4
    "pool-args": (dict(attn_pool_num_heads=4, attn_pool_mlp_ratio=2.0), 4, 64),
}


def tiny(seed: int = 0, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model(NAME, **{**TINY, **options})
    model.attn_pool.fused_attn = False
    return randomize_(model, seed=seed).eval()


def check_exact(model: torch.nn.Module, loaded, seed: int, size: int = 32) -> None:
    x = images(2, size, size, seed=seed)
    ref_logits, ref_attn = reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL * float(ref_logits.abs().max()))
    assert_attention(ref_attn, attn)


@pytest.mark.parametrize("case", sorted(CASES))
def test_pe_core_folder_and_named_bare_open_exactly(tmp_path: Path, case: str) -> None:
    options, heads, width = CASES[case]
    model = tiny(seed=1, **options)
    save_for_hf(model, tmp_path / "folder", safe_serialization=True, model_args=options)
    torch.save(model.state_dict(), tmp_path / "bare.pth")
    named = {"arch": NAME, "heads": 4}  # the pool's width the weights show, its heads they don't
    if "attn_pool_num_heads" in options:
        named["pool_heads"] = options["attn_pool_num_heads"]
    for path, settings in ((tmp_path / "folder", None), (tmp_path / "bare.pth", named)):
        loaded = load_checkpoint(path, settings)
        cfg = loaded.config
        assert loaded.family == "timm-eva" and cfg.global_pool == "map"
        assert (cfg.pool_heads, cfg.pool_hidden_dim) == (heads, width) and cfg.pool_include_prefix
        assert (cfg.heads, cfg.rope, cfg.pre_norm) == (4, "axial", True)
        assert loaded.model.pool.heads == heads
        assert any("checked against timm" in n for n in loaded.notes), loaded.notes
        parts = " ".join(kind_of(loaded).parts(loaded.model))
        assert "an attention-pooling probe" in parts
        assert ("(8 heads of its own)" in parts) == (heads == 8)
        check_exact(model, loaded, seed=1)


def test_an_eva02_with_an_attention_pool_opens_exactly(tmp_path: Path) -> None:
    """The pool of a SwiGLU Eva (its GELU MLP as wide as the blocks' gated one)."""
    torch.manual_seed(5)
    model = timm.create_model("eva02_tiny_patch14_224", **TINY, global_pool="map")
    model.attn_pool.fused_attn = False
    randomize_(model, seed=5).eval()
    save_for_hf(model, tmp_path / "m", safe_serialization=True, model_args={"global_pool": "map"})
    loaded = load_checkpoint(tmp_path / "m")
    cfg = loaded.config
    assert cfg.swiglu and (cfg.global_pool, cfg.pool_heads) == ("map", 4)
    assert cfg.pool_hidden_dim is None and model.attn_pool.mlp.fc1.out_features == cfg.hidden_dim
    check_exact(model, loaded, seed=5)


def test_a_real_sized_bare_pe_core_is_recognised_by_its_tensors(tmp_path: Path) -> None:
    torch.manual_seed(4)  # timm's tiny PE core at its own widths (the position table's length
    model = timm.create_model(NAME, pretrained=False, img_size=32)  # is left out of the match)
    model.attn_pool.fused_attn = False
    randomize_(model, seed=4).eval()
    with torch.no_grad():  # 512 outputs of 12 random blocks: logits to ~1 (zoo_helpers.ours
        model.head.weight.mul_(0.01)  # compares its two paths to 1e-5 absolute)
    torch.save(model.state_dict(), tmp_path / "pe.pth")
    loaded = load_checkpoint(tmp_path / "pe.pth")
    assert loaded.family == "timm-eva" and any(NAME in n for n in loaded.notes)
    assert (loaded.config.heads, loaded.config.pool_heads) == (3, 8)
    check_exact(model, loaded, seed=4)


def test_a_tiny_unnamed_bare_pe_core_is_refused_naming_arch(tmp_path: Path) -> None:
    """No timm name has its tensors, and its layout is PE core's alone: asked for ``heads`` it
    used to open as the common ViT, without its rotary positions (test_bare_ambiguity.py)."""
    torch.save(tiny(seed=2).state_dict(), tmp_path / "pe.pth")
    for settings in (None, {"heads": 4}):
        with pytest.raises(CheckpointError, match=r"vit_pe_core_\*.*--arch NAME") as caught:
            load_checkpoint(tmp_path / "pe.pth", settings)
        assert "\n" not in str(caught.value)
        assert not isinstance(caught.value, MissingSettingsError)


def test_an_attention_pool_the_architecture_lacks_is_refused(tmp_path: Path) -> None:
    state = tiny(seed=2).state_dict()
    torch.save(state, tmp_path / "pe.pth")
    with pytest.raises(CheckpointError, match="attention-pool head"):
        load_checkpoint(tmp_path / "pe.pth", {"arch": "vit_pe_spatial_tiny_patch16_512"})


def test_pool_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="pool_heads needs global_pool 'map'"):
        ViTConfig(dim=32, heads=4, pool_heads=8)
    with pytest.raises(ValueError, match="not divisible by pool_heads 5"):
        ViTConfig(dim=32, heads=4, global_pool="map", pool_heads=5)
    with pytest.raises(ValueError, match="pool_hidden_dim must be at least 1"):
        ViTConfig(dim=32, heads=4, global_pool="map", pool_hidden_dim=0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_maps_start_from_the_probe_row(tmp_path: Path, case: str, photo_files) -> None:
    options, heads, _ = CASES[case]
    model = tiny(seed=3, **options)
    save_for_hf(model, tmp_path / "folder", safe_serialization=True, model_args=options)
    a = analyze(load_checkpoint(tmp_path / "folder"), photo_files["chelsea"])
    P = a.num_prefix_tokens
    logits, A, G, a_p, g_p = _reference(model, a.input[None], P, True)
    torch.testing.assert_close(a.logits.double(), logits[0], rtol=1e-4, atol=1e-5)
    assert a.probe_attention.shape[0] == heads and a.num_heads == 4
    torch.testing.assert_close(a.probe_attention.double(), a_p, rtol=0, atol=1e-5)
    assert_probe_maps(a, A, G, a_p, g_p)

    # the last layer's raw map without a query: the probe's heads, or their mean in each slot
    want = a_p[:, P:].reshape(heads, 4, 4)
    if heads != a.num_heads:
        want = want.mean(0, keepdim=True).expand(a.num_heads, 4, 4)
    torch.testing.assert_close(a.attention_maps(-1).double(), want, rtol=0, atol=1e-5)
    head_maps, mean_maps, _ = a.host_query_maps(None)
    torch.testing.assert_close(torch.from_numpy(head_maps[-1]).double(), want, rtol=0, atol=1e-5)
    torch.testing.assert_close(
        torch.from_numpy(mean_maps[-1]).double(), want.mean(0), rtol=0, atol=1e-5
    )
    words = engine_data.words(P, True, engine_data._differing_probe_heads(a)).query_none
    assert ("the mean of its 8 heads" in words) == (heads != a.num_heads)
    if heads != a.num_heads:
        with pytest.raises(ValueError, match="8 heads, the layers 4"):
            a.rollout(heads=[0])
    else:
        torch.testing.assert_close(a.rollout(heads=[0, 1, 2, 3]), a.rollout(), rtol=0, atol=1e-6)
    assert_attribution_offered(a)  # the pool's own heads: its LRP reads the pool's count
