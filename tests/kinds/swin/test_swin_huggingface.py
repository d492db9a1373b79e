"""Hugging Face Swin folders open as vitviz's Swin: transformers' logits and eager attention."""

from __future__ import annotations

import pytest
import torch
from swin_helpers import run_ours, tiny_hf_swin
from zoo_helpers import ATTN_ATOL, LOGIT_ATOL, assert_close, images

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.swin.network import SwinTransformer


def hf_reference(model, x):
    """Logits (or pooled features), every block's eager attention (hooks on the attention
    modules) and the attention transformers hands back with output_attentions."""
    model.config._attn_implementation = "eager"
    blocks, handles = [], []
    for module in model.modules():
        if type(module).__name__ in ("SwinAttention", "Swinv2SelfAttention"):
            handles.append(module.register_forward_hook(lambda _m, _i, o: blocks.append(o[1])))
    with torch.no_grad():
        out = model(pixel_values=x, output_attentions=True)
    for h in handles:
        h.remove()
    main = out.logits if hasattr(out, "logits") else out.pooler_output
    return main, blocks, list(out.attentions)


@pytest.mark.parametrize(
    ("version", "img", "window", "size"),
    [
        (1, 224, 7, (224, 224)),  # the default size of Swin
        (2, 256, 8, (256, 256)),  # and of Swinv2
        *[(v, 224, 7, (200, 200)) for v in (1, 2)],  # padded: 50 -> 56, 25 -> 28
        *[(v, 64, 4, (62, 50)) for v in (1, 2)],  # image padded to whole patches, maps to windows
    ],
)
def test_logits_and_attention_match_transformers(tmp_path, version, img, window, size):
    ref_model = tiny_hf_swin(window=window, image_size=img, version=version)
    ref_model.save_pretrained(tmp_path / "swin")
    loaded = load_checkpoint(tmp_path / "swin")
    assert isinstance(loaded.model, SwinTransformer)
    assert loaded.family == ("huggingface-swin" if version == 1 else "huggingface-swinv2")
    assert loaded.config.version == version
    x = images(1 if max(size) > 100 else 2, *size)  # one image at the default size
    ref_logits, ref_blocks, ref_out = hf_reference(ref_model, x)
    logits, out = run_ours(loaded.model, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert len(ref_blocks) == len(out.attentions) == 4
    for b, (r, got) in enumerate(zip(ref_blocks, out.attentions, strict=True)):
        assert_close(f"attention block {b}", r.reshape(got.shape), got, ATTN_ATOL)
    last_of_stage = [out.attentions[1], out.attentions[3]]
    for s, (r, got) in enumerate(zip(ref_out, last_of_stage, strict=True)):
        assert_close(f"output_attentions stage {s}", r.reshape(got.shape), got, ATTN_ATOL)
    assert loaded.class_names == [ref_model.config.id2label[i] for i in range(5)]


def test_swin_model_in_memory_names(tmp_path):
    """A SwinModel (no classifier: the pooled features) saved with transformers 5's in-memory
    names (q_proj, o_proj, mlp.fc1) beside its config.json."""
    from transformers import SwinModel

    ref_model = SwinModel(tiny_hf_swin(window=4).config).eval()
    ref_model.load_state_dict(
        {
            k.removeprefix("swin."): v
            for k, v in tiny_hf_swin(window=4).state_dict().items()
            if k.startswith("swin.")
        }
    )
    ref_model.config.save_pretrained(tmp_path)
    path = tmp_path / "weights.pth"
    torch.save(ref_model.state_dict(), path)
    loaded = load_checkpoint(path)
    assert loaded.config.num_classes == 0
    x = images(1, 64, 64)
    ref_pooled, _, _ = hf_reference(ref_model, x)
    logits, _ = run_ours(loaded.model, x)
    assert_close("pooled features", ref_pooled, logits, LOGIT_ATOL)


def test_attention_gradients_pair_with_their_own_block(tmp_path):
    """∂y_c/∂A_b of analyze_swin equals the gradient transformers' eager attention gets, block
    by block (shifted blocks and a padded size included)."""
    from vitviz.kinds.swin.analysis import analyze_swin

    ref_model = tiny_hf_swin(window=4)
    ref_model.save_pretrained(tmp_path / "swin")
    loaded = load_checkpoint(tmp_path / "swin")
    x = images(1, 60, 52)
    result = analyze_swin(loaded, x[0], gradients=True, target_class=3)
    ref_model.config._attn_implementation = "eager"
    kept, handles = [], []
    for module in ref_model.modules():
        if type(module).__name__ == "SwinAttention":
            handles.append(module.register_forward_hook(lambda _m, _i, o: kept.append(o[1])))
    logits = ref_model(pixel_values=x).logits
    for a in kept:
        a.retain_grad()
    logits[0, 3].backward()
    for h in handles:
        h.remove()
    assert result.gradients is not None and len(kept) == len(result.gradients) == 4
    for b, (r, got) in enumerate(zip(kept, result.gradients, strict=True)):
        assert r.grad is not None and float(r.grad.abs().max()) > 1e-2
        assert_close(f"gradient block {b}", r.grad.reshape(got.shape), got, 1e-5)
