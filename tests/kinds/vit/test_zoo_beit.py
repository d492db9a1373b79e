"""timm BEiT (relative position bias): per-layer bias tables, q/v biases, LayerScale,
mean pooling or CLS, with or without an absolute position embedding, as a bare state dict and
as timm's folder; logits and attention against timm's eager forward, relevance and gradient
rollout through the bias against float64 references from their definitions, transformer
attribution offered."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_attribution_offered,
    assert_close,
    assert_timm_relevance_maps,
    images,
    ours,
    randomize_,
)

from vitviz.blocks.position_bias import relative_position_index
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.pipeline.analysis import analyze

TINY = dict(pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
            num_classes=3)  # fmt: skip


def tiny_beit(seed: int = 0, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    return randomize_(timm.create_model("beit_base_patch16_224", **{**TINY, **options}), seed=seed)


def test_the_relative_position_index_is_beits() -> None:
    from timm.models.beit import gen_relative_position_index

    for grid in ((4, 4), (3, 5)):
        assert torch.equal(relative_position_index(grid), gen_relative_position_index(grid))


@pytest.mark.parametrize(
    "options",
    [{}, {"global_pool": "token"}, {"use_abs_pos_emb": True}, {"init_values": None}],
    ids=["mean-pool", "cls", "abs-pos", "no-layer-scale"],
)
def test_timm_beit_state_dict_opens_exactly(tmp_path: Path, options) -> None:
    model = tiny_beit(**options)
    path = tmp_path / "beit.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path)
    assert loaded.family == "timm-beit" and loaded.config.rel_pos_bias
    assert loaded.config.heads == 4 and loaded.config.image_size == (32, 32)
    x = images(2, 32, 32)
    from zoo_helpers import timm_reference

    ref_logits, ref_attn = timm_reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert_attention(ref_attn, attn)


def test_timm_beit_folder_and_its_preprocessing(tmp_path: Path) -> None:
    model = tiny_beit(seed=1)
    save_for_hf(model, tmp_path / "beit", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "beit")
    assert loaded.family == "timm-beit"
    assert loaded.preprocessing.mean == pytest.approx((0.5, 0.5, 0.5))
    x = images(1, 32, 32, seed=1)
    from zoo_helpers import timm_reference

    ref_logits, ref_attn = timm_reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert_attention(ref_attn, attn)


def test_a_shared_bias_is_refused_by_name(tmp_path: Path) -> None:
    model = tiny_beit(use_rel_pos_bias=False, use_shared_rel_pos_bias=True)
    path = tmp_path / "shared.pth"
    torch.save(model.state_dict(), path)
    with pytest.raises(CheckpointError, match="shared by every layer"):
        load_checkpoint(path)


def test_another_grid_resamples_the_tables(tmp_path: Path) -> None:
    """An input of another size (here 48×32, a 6×4 grid) runs: each layer's table resampled as
    transformers' BEiT resamples it (``blocks/position_bias.resample_table``, DESIGN §3)."""
    path = tmp_path / "beit.pth"
    torch.save(tiny_beit().state_dict(), path)
    loaded = load_checkpoint(path)
    analysis = analyze(loaded, torch.randn(3, 48, 32))
    assert analysis.grid == (6, 4) and analysis.attention.shape[-1] == 1 + 6 * 4


def test_relevance_and_gradient_rollout_through_the_bias(tmp_path: Path, photo_files) -> None:
    """Float64 references from the definitions (DESIGN §5) on timm's own attention, with its
    autograd: relevance R = I + Σ Ā_l R, Ā_l = E_h[(∇A ⊙ A)⁺]; gradient rollout's chain."""
    model = tiny_beit(seed=2, global_pool="token")
    path = tmp_path / "beit.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path)
    a = analyze(loaded, photo_files["chelsea"], gradients=True)
    target = a.top_class
    assert_timm_relevance_maps(a, model, target, atol=1e-6)
    assert_attribution_offered(a, target)


@pytest.mark.parametrize("model_type", ["beit", "data2vec-vision"])
@pytest.mark.parametrize("mean_pool", [True, False], ids=["mean-pool", "cls"])
def test_transformers_beit_folders_open_exactly(tmp_path: Path, model_type, mean_pool) -> None:
    import transformers as tr

    names = {
        "beit": ("BeitConfig", "BeitForImageClassification"),
        "data2vec-vision": ("Data2VecVisionConfig", "Data2VecVisionForImageClassification"),
    }
    config = getattr(tr, names[model_type][0])(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        image_size=32, patch_size=8, num_labels=3, use_relative_position_bias=True,
        layer_scale_init_value=0.1, use_mean_pooling=mean_pool, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(3)
    model = randomize_(getattr(tr, names[model_type][1])(config), seed=3)
    model.save_pretrained(tmp_path / model_type)
    loaded = load_checkpoint(tmp_path / model_type)
    cfg = loaded.config
    assert cfg.rel_pos_bias and cfg.global_pool == ("avg" if mean_pool else "token")
    x = images(2, 32, 32, seed=3)
    with torch.no_grad():
        ref = model(pixel_values=x, output_attentions=True)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref.logits, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)


def test_a_transformers_beit_base_without_pooler_reads_the_last_cls(tmp_path: Path) -> None:
    """Data2VecVisionModel without its pooler: no final norm, the last block's CLS token."""
    import transformers as tr

    config = tr.Data2VecVisionConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        image_size=32, patch_size=8, use_relative_position_bias=True, use_mean_pooling=True,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(4)
    model = randomize_(tr.Data2VecVisionModel(config, add_pooling_layer=False), seed=4)
    model.save_pretrained(tmp_path / "d2v")
    loaded = load_checkpoint(tmp_path / "d2v")
    assert not loaded.config.final_norm
    x = images(1, 32, 32, seed=4)
    with torch.no_grad():
        ref = model(pixel_values=x, output_attentions=True)
    logits, attn = ours(loaded, x)
    assert_close("CLS", ref.last_hidden_state[:, 0], logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)


def test_the_model_info_names_the_parts(tmp_path: Path, capsys) -> None:
    """vitviz-cli info: the family and the parts it maps onto."""
    from vitviz.cli import main

    path = tmp_path / "beit.pth"
    torch.save(tiny_beit(seed=5).state_dict(), path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    family = next(line for line in out.splitlines() if line.startswith("family:"))
    parts = next(line for line in out.splitlines() if line.startswith("parts:"))
    assert "timm-beit" in family
    for word in ("relative position bias", "LayerScale", "no absolute positions",
                 "mean of the patch tokens through fc_norm", "pre-norm"):  # fmt: skip
        assert word in parts, parts
