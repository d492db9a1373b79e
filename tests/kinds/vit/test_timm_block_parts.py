"""The block parts of timm's own ViT, as parts of vitviz's one ViT (DESIGN §3, §4): RMSNorm,
parallel attention/MLP blocks, blocks of several parallel branches, qk-norm, norms inside the
attention and the MLP (beit3), residual post-norm. Each opens with timm's logits (1e-4
relative) and attention (1e-5) from a timm folder (config.json with the architecture and its
model_args) and a bare state dict, and every method of the table runs on it (transformer
attribution's rules for them: the float64 reference in
tests/explain/test_explain_attribution_parts.py).

The real names (vit_base_patch16_xp_224, vit_pwee_*, beit3_*, *_rpn_*) at their own widths:
tests/checkpoints/test_exact_or_refused.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf
from zoo_helpers import ATTN_ATOL, images, max_diff, randomize_, timm_reference

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.explain.methods import compute_maps, methods_for
from vitviz.kindapi import kind_of
from vitviz.pipeline.analysis import analyze

LOGITS_RTOL = 1e-4
SMALL = dict(img_size=32, depth=2, num_classes=5)
# (name, what makes it the part, the words of the model info's parts line)
CASES = {
    "qk-norm": ("vit_small_patch16_224", dict(qk_norm=True), "qk-norm"),
    "rms-parallel-qk": ("vit_base_patch16_xp_224", dict(embed_dim=64, num_heads=4), "RMSNorm"),
    "parallel": ("vit_pwee_patch16_reg1_gap_256", dict(embed_dim=192, num_heads=3), "parallel ("),
    "sub-norms": ("beit3_base_patch16_224", dict(embed_dim=64, num_heads=4), "sub-LN"),
    "rpn": ("vit_base_patch16_rpn_224", dict(embed_dim=64, num_heads=4), "residual post-norm"),
    "branches": ("vit_small_patch16_18x2_224", dict(embed_dim=64, num_heads=4), "2-branch ("),
}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VITVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VITVIZ_NO_LIBRARY_CHECK", raising=False)


def _timm(name: str, args: dict, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model(name, pretrained=False, **SMALL, **args)
    return randomize_(model, seed=seed, noise_dtype=torch.float32)


def _assert_exact(path: Path, model: torch.nn.Module, settings: dict | None = None) -> object:
    loaded = load_checkpoint(path, settings)
    x = images(2, 32, 32, seed=5)
    ref_logits, ref_attn = timm_reference(model, x)
    with torch.no_grad():
        logits = loaded.model(x)
        explained = loaded.model.forward_explained(x, capture_attention=True)
    scale = float(ref_logits.abs().max())
    assert scale > 0.1
    for ours in (logits, explained.logits):
        assert max_diff(ours, ref_logits) / scale <= LOGITS_RTOL
    assert len(explained.attentions) == len(ref_attn) == 2
    for ours, theirs in zip(explained.attentions, ref_attn, strict=True):
        assert max_diff(ours, theirs) <= ATTN_ATOL
    return loaded


@pytest.mark.parametrize("case", list(CASES))
def test_a_timm_folder_with_the_part_opens_exactly(tmp_path: Path, case: str) -> None:
    name, args, words = CASES[case]
    model = _timm(name, args, seed=len(case))
    save_for_hf(model, tmp_path / case, model_args={**args, "depth": 2}, safe_serialization=True)
    loaded = _assert_exact(tmp_path / case, model)
    assert any(n.startswith("checked against timm") for n in loaded.notes), loaded.notes
    parts = "; ".join(kind_of(loaded).parts(loaded.model))
    assert words in parts, parts


def test_a_bare_state_dict_shows_qk_norm_and_a_parallel_block_by_its_tensors(
    tmp_path: Path,
) -> None:
    """A bare file of widths no timm name has: the weights show qk-norm (its tensors) and the
    parallel block (its fused in_proj); the RMSNorm xp's norm before the blocks without a patch
    bias is also CLIP's layout, so that one asks for its name."""
    for case in ("qk-norm", "parallel"):
        name, args, _ = CASES[case]
        model = _timm(name, args, seed=3)
        torch.save(model.state_dict(), tmp_path / f"{case}.pth")
        block = model.blocks[0]
        heads = getattr(block, "num_heads", None) or block.attn.num_heads
        # a bare file says neither its activation, nor its heads at these widths, nor (a table
        # without the class token) its grid: the user does
        settings = {"activation": "gelu", "heads": heads, "image_size": [32, 32]}
        loaded = _assert_exact(tmp_path / f"{case}.pth", model, settings)
        assert loaded.config.qk_norm == (case == "qk-norm")
        assert loaded.config.parallel == (case == "parallel")
    name, args, _ = CASES["rms-parallel-qk"]
    torch.save(_timm(name, args, seed=3).state_dict(), tmp_path / "xp.pth")
    with pytest.raises(CheckpointError, match="--arch NAME"):
        load_checkpoint(tmp_path / "xp.pth")


def test_a_bare_state_dict_of_several_branches_opens_with_its_heads(tmp_path: Path) -> None:
    """Blocks of several branches (timm's ParallelThingsBlock) by their tensors alone: each
    layer's attention is its branches' heads side by side, as the library's."""
    name, args, _ = CASES["branches"]
    model = _timm(name, args, seed=3)
    torch.save(model.state_dict(), tmp_path / "b.pth")
    loaded = _assert_exact(tmp_path / "b.pth", model, {"activation": "gelu", "heads": 4})
    assert loaded.config.branches == 2 and loaded.config.layer_heads == 8
    assert kind_of(loaded).parameter_bounds(loaded.model) == (2, 8)


@pytest.mark.parametrize("case", ["rms-parallel-qk", "qk-norm", "branches"])
def test_every_method_runs_on_the_part(tmp_path: Path, case: str) -> None:
    """Every method of the table has its rule for these parts: each gives a finite map, the
    attention-based ones not flat (transformer attribution's equality with its float64
    definition: the parts test)."""
    name, args, _ = CASES[case]
    model = _timm(name, args, seed=4)
    save_for_hf(model, tmp_path / case, model_args={**args, "depth": 2}, safe_serialization=True)
    loaded = load_checkpoint(tmp_path / case)
    image = (images(1, 32, 32, seed=4)[0].permute(1, 2, 0).clamp(-2, 2) * 60 + 128).byte()
    analysis = analyze(loaded, image.numpy())
    names = [m.name for m in methods_for(analysis)]
    for needed in ("rollout", "gradient-rollout", "relevance", "transformer-attribution"):
        assert needed in names, names
    structured = (
        "attention",
        "rollout",
        "gradient-rollout",
        "relevance",
        "transformer-attribution",
    )
    if case in ("branches", "rpn"):  # a norm per branch, a norm after the attention:
        # Grad-CAM's auto reads the last block's output (DESIGN §5)
        assert "gradcam" in names and loaded.kind.cam_layers(loaded.model).auto == "1.output"
    for method, grid in compute_maps(analysis, names).items():
        assert torch.isfinite(grid).all(), method
        if method in structured:  # (a ReLU'd Grad-CAM or a mask share may be flat on 2 × 2)
            assert float(grid.max() - grid.min()) > 0, method


@pytest.mark.parametrize("case", ["qk-norm", "parallel", "branches"])
def test_a_bare_files_block_kind_is_checked_against_timm_built_with_it(
    tmp_path: Path, case: str
) -> None:
    """A bare file no timm name has: timm's VisionTransformer is built with the block kind its
    tensors show (qk-norm, a parallel block, several branches) beside its sizes, so the check
    compares like with like and says so (never "not checked", never refused)."""
    name, args, _ = CASES[case]
    model = _timm(name, args, seed=6)
    torch.save(model.state_dict(), tmp_path / "m.pth")
    settings = {"activation": "gelu", "heads": args.get("num_heads", 6), "image_size": [32, 32]}
    loaded = load_checkpoint(tmp_path / "m.pth", settings)
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
    said = {"qk-norm": "qk-norm", "parallel": "parallel blocks", "branches": "2 branches"}[case]
    assert "VisionTransformer with width" in checked[0] and said in checked[0], checked[0]


def test_a_named_file_of_other_sizes_is_checked_with_its_sizes(tmp_path: Path) -> None:
    """--arch names timm's 12-block residual post-norm ViT for a 2-block file of width 64: timm's
    model is built with the file's width and depth (the name gives the rest), and checks it."""
    name, args, _ = CASES["rpn"]
    model = _timm(name, args, seed=7)
    torch.save(model.state_dict(), tmp_path / "rpn.pth")
    loaded = load_checkpoint(tmp_path / "rpn.pth", {"arch": name, "heads": 4})
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
    assert f"{name} with width 64, depth 2" in checked[0], checked[0]
