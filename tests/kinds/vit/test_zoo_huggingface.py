"""Hugging Face folders (save_pretrained + preprocessor_config.json) open with transformers' own
logits / hidden states, eager attention, id2label and image-processor settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import (
    BitImageProcessor,
    DeiTConfig,
    DeiTForImageClassificationWithTeacher,
    DeiTImageProcessor,
    Dinov2Config,
    Dinov2Model,
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
    ViTModel,
)
from zoo_helpers import LOGIT_ATOL, assert_attention, assert_close, images, ours, randomize_

from vitviz.checkpoints import load_checkpoint

SMALL = dict(
    hidden_size=32,
    num_hidden_layers=2,
    intermediate_size=64,
    patch_size=8,
    image_size=32,
    attn_implementation="eager",
)
LABELS = {0: "tabby", 1: "rocket", 2: "coffee"}


def _save(model: torch.nn.Module, folder: Path, processor: object | None = None) -> Path:
    model.save_pretrained(folder)
    if processor is not None:
        processor.save_pretrained(folder)
    return folder


def _reference(model: torch.nn.Module, x: torch.Tensor, **kwargs: object):
    with torch.no_grad():
        return model(pixel_values=x, output_attentions=True, **kwargs)


def _features(loaded, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return loaded.model.forward_features(x)[0]


@pytest.mark.parametrize(("heads", "act"), [(4, "gelu"), (2, "gelu_new")])
def test_hf_vit_for_image_classification(tmp_path: Path, heads: int, act: str) -> None:
    torch.manual_seed(0)
    config = ViTConfig(
        **SMALL,
        num_attention_heads=heads,
        hidden_act=act,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
    )
    model = randomize_(ViTForImageClassification(config))
    processor = ViTImageProcessor(size={"height": 32, "width": 32})
    loaded = load_checkpoint(_save(model, tmp_path / "vit", processor))
    assert loaded.family == "huggingface-vit"
    assert loaded.config.norm_eps == 1e-12 and loaded.config.heads == heads
    assert loaded.config.activation == ("gelu" if act == "gelu" else "gelu_tanh")
    assert loaded.class_names == ["tabby", "rocket", "coffee"]
    prep = loaded.preprocessing
    assert (prep.resize, prep.image_size, prep.interpolation) == ("squash", (32, 32), "bilinear")
    assert prep.mean == pytest.approx(tuple(processor.image_mean))
    x = images(2, 32, 32)
    ref = _reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref.logits, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)
    # Another size: transformers interpolates the position table when asked to.
    y = images(1, 48, 32, seed=1)
    ref = _reference(model, y, interpolate_pos_encoding=True)
    logits, attn = ours(loaded, y)
    assert_close("logits 48×32", ref.logits, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)


def test_hf_vit_model_without_head_gives_hidden_states_and_pooler(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = randomize_(ViTModel(ViTConfig(**SMALL, num_attention_heads=4)), seed=1)
    loaded = load_checkpoint(_save(model, tmp_path / "vitmodel"))
    assert loaded.config.num_classes == 0 and loaded.class_names == []
    x = images(2, 32, 32, seed=1)
    ref = _reference(model, x)
    assert_close("last_hidden_state", ref.last_hidden_state, _features(loaded, x), LOGIT_ATOL)
    logits, attn = ours(loaded, x)
    assert_close("pooler_output", ref.pooler_output, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)
    assert any("no preprocessor_config.json" in n for n in loaded.notes)
    assert loaded.preprocessing.resize == "squash"


def test_hf_deit_with_teacher_averages_both_classifiers(tmp_path: Path) -> None:
    torch.manual_seed(2)
    config = DeiTConfig(**SMALL, num_attention_heads=2, num_labels=4)
    model = randomize_(DeiTForImageClassificationWithTeacher(config), seed=2)
    processor = DeiTImageProcessor(
        size={"height": 36, "width": 36}, crop_size={"height": 32, "width": 32}
    )
    loaded = load_checkpoint(_save(model, tmp_path / "deit", processor))
    assert loaded.config.distill_token
    x = images(2, 32, 32, seed=2)
    ref = _reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref.logits, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)
    prep = loaded.preprocessing
    assert (prep.resize, prep.image_size, prep.interpolation) == ("crop", (32, 32), "bicubic")
    assert int(32 / prep.crop_pct) == 36
    assert loaded.class_names == [config.id2label[i] for i in range(4)]


@pytest.mark.parametrize("size", [(28, 28), (42, 28)])
def test_hf_dinov2_model(tmp_path: Path, size: tuple[int, int]) -> None:
    torch.manual_seed(3)
    config = Dinov2Config(
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=3,
        image_size=28,
        patch_size=7,
        attn_implementation="eager",
    )
    model = randomize_(Dinov2Model(config), seed=3)
    processor = BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 28, "width": 28})
    loaded = load_checkpoint(_save(model, tmp_path / "dinov2", processor))
    assert any("mask_token" in n for n in loaded.notes)
    assert loaded.config.layer_scale_init is not None
    x = images(1, *size, seed=3)
    ref = _reference(model, x)
    assert_close("last_hidden_state", ref.last_hidden_state, _features(loaded, x), LOGIT_ATOL)
    logits, attn = ours(loaded, x)
    assert_close("pooler_output", ref.pooler_output, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)
    prep = loaded.preprocessing
    assert (prep.resize, prep.image_size, prep.interpolation) == ("crop", (28, 28), "bicubic")
    assert int(28 / prep.crop_pct) == 32


@pytest.mark.parametrize("size", [(28, 28), (35, 56)])
def test_hf_dinov2_with_registers(tmp_path: Path, size: tuple[int, int]) -> None:
    """Registers join after the position embedding: CLS has a table entry, registers none."""
    torch.manual_seed(4)
    config = Dinov2WithRegistersConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=28,
        patch_size=7,
        num_register_tokens=3,
        attn_implementation="eager",
    )
    model = randomize_(Dinov2WithRegistersModel(config), seed=4)
    loaded = load_checkpoint(_save(model, tmp_path / "reg"))
    cfg = loaded.config
    assert (cfg.num_register_tokens, cfg.num_pos_prefix_tokens) == (3, 1)
    x = images(1, *size, seed=4)
    ref = _reference(model, x)
    assert_close("last_hidden_state", ref.last_hidden_state, _features(loaded, x), LOGIT_ATOL)
    logits, attn = ours(loaded, x)
    assert_close("pooler_output", ref.pooler_output, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)


def test_hf_in_memory_names_of_a_plain_state_dict(tmp_path: Path) -> None:
    """torch.save(model.state_dict()) of a transformers 5 model: q_proj/k_proj/v_proj names."""
    torch.manual_seed(5)
    model = randomize_(
        ViTForImageClassification(ViTConfig(**SMALL, num_attention_heads=4, num_labels=3)), seed=5
    )
    path = tmp_path / "vit_sd.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, config={"heads": 4, "norm_eps": 1e-12})
    x = images(2, 32, 32, seed=5)
    assert_close("logits", _reference(model, x).logits, ours(loaded, x)[0], LOGIT_ATOL)


def test_hf_vit_msn_is_a_vit_under_its_own_name(tmp_path: Path) -> None:
    from transformers import ViTMSNConfig, ViTMSNForImageClassification

    torch.manual_seed(6)
    config = ViTMSNConfig(**SMALL, num_attention_heads=4, num_labels=3)
    model = randomize_(ViTMSNForImageClassification(config), seed=6)
    loaded = load_checkpoint(_save(model, tmp_path / "msn"))
    assert loaded.family == "huggingface-vit_msn" and loaded.config.class_token
    x = images(2, 32, 32, seed=6)
    ref = _reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref.logits, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)


@pytest.mark.parametrize("head", ["classifier", "backbone"])
def test_hf_ijepa_has_no_cls_and_reads_the_mean_token(tmp_path: Path, head: str) -> None:
    from transformers import IJepaConfig, IJepaForImageClassification, IJepaModel

    torch.manual_seed(7)
    config = IJepaConfig(**SMALL, num_attention_heads=2, num_labels=3)
    model = IJepaForImageClassification(config) if head == "classifier" else IJepaModel(config)
    model = randomize_(model, seed=7)
    loaded = load_checkpoint(_save(model, tmp_path / "ijepa"))
    cfg = loaded.config
    assert (cfg.class_token, cfg.global_pool, cfg.num_prefix_tokens) == (False, "avg", 0)
    x = images(2, 32, 32, seed=7)
    ref = _reference(model, x)
    logits, attn = ours(loaded, x)
    if head == "classifier":
        assert_close("logits", ref.logits, logits, LOGIT_ATOL)
    else:
        assert_close("last_hidden_state", ref.last_hidden_state, _features(loaded, x), LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)


@pytest.mark.parametrize("head", ["pretraining", "encoder"])
def test_hf_vit_mae_opens_its_encoder_unmasked(tmp_path: Path, head: str) -> None:
    """ViT-MAE: a ViT with a fixed sin-cos table; vitviz shows the encoder on every
    patch in order, which transformers gives with mask_ratio 0 and ascending noise (no patch
    dropped or shuffled). ViTMAEForPreTraining's pixel decoder is dropped, said so; a folder
    saved with its pre-training mask_ratio 0.75 opens as the same unmasked encoder."""
    from transformers import ViTMAEConfig, ViTMAEForPreTraining, ViTMAEModel

    torch.manual_seed(8)
    config = ViTMAEConfig(**SMALL, num_attention_heads=4, mask_ratio=0.75,
                          decoder_hidden_size=16, decoder_num_hidden_layers=1,
                          decoder_num_attention_heads=2, decoder_intermediate_size=32)  # fmt: skip
    model = ViTMAEForPreTraining(config) if head == "pretraining" else ViTMAEModel(config)
    model = randomize_(model, seed=8)
    loaded = load_checkpoint(_save(model, tmp_path / "mae"))
    cfg = loaded.config
    assert loaded.family == "huggingface-vit_mae" and cfg.class_token and cfg.num_classes == 0
    notes = " ".join(loaded.notes)
    assert "mask_ratio 0" in notes and "checked against transformers" in notes
    assert ("pixel decoder" in notes) == (head == "pretraining")
    encoder = model.vit if head == "pretraining" else model
    encoder.config.mask_ratio = 0.0
    x = images(2, 32, 32, seed=8)
    ordered = torch.arange(16.0).expand(2, 16)
    ref = _reference(encoder, x, noise=ordered)
    features = _features(loaded, x)
    assert_close("last_hidden_state", ref.last_hidden_state, features, LOGIT_ATOL)
    assert_attention(list(ref.attentions), ours(loaded, x)[1])
    shuffled = _reference(encoder, x, noise=torch.rand(2, 16, generator=torch.Generator()))
    assert not torch.allclose(shuffled.attentions[0], ref.attentions[0], atol=1e-3)


@pytest.mark.parametrize("registers", [0, 2])
def test_hf_dinov2_classifier_reads_cls_and_the_mean_patch(tmp_path: Path, registers) -> None:
    """Dinov2(WithRegisters)ForImageClassification: a classifier over [CLS, mean of patches]."""
    from transformers import (
        Dinov2ForImageClassification,
        Dinov2WithRegistersConfig,
        Dinov2WithRegistersForImageClassification,
    )

    torch.manual_seed(8)
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=28,
                 patch_size=7, num_labels=3, attn_implementation="eager")  # fmt: skip
    if registers:
        config = Dinov2WithRegistersConfig(**small, num_register_tokens=registers)
        model = Dinov2WithRegistersForImageClassification(config)
    else:
        model = Dinov2ForImageClassification(Dinov2Config(**small))
    model = randomize_(model, seed=8)
    loaded = load_checkpoint(_save(model, tmp_path / "dinocls"))
    assert loaded.config.global_pool == "token_avg"
    x = images(2, 28, 28, seed=8)
    ref = _reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref.logits, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)


def test_hf_deit_without_teacher_reads_the_cls_token_alone(tmp_path: Path) -> None:
    """DeiTForImageClassification: a distillation token, but one classifier, on CLS."""
    from transformers import DeiTForImageClassification

    torch.manual_seed(9)
    config = DeiTConfig(**SMALL, num_attention_heads=2, num_labels=4)
    model = randomize_(DeiTForImageClassification(config), seed=9)
    loaded = load_checkpoint(_save(model, tmp_path / "deitcls"))
    assert loaded.config.distill_token and not loaded.config.distill_head
    assert loaded.model.head_dist is None
    x = images(2, 32, 32, seed=9)
    ref = _reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref.logits, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)
