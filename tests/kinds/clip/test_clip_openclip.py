"""OpenCLIP state dicts open as the CLIP kind: converted from their keys, with the
activation the settings name, they give open_clip's own logits, attention and embeddings, and
the tokenizer open_clip ships gives open_clip's ids. Random weights (biases and norms too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.kindapi import kind_of
from vitviz.pipeline.analysis import analyze

open_clip = pytest.importorskip("open_clip", reason="open_clip_torch is not installed")

PROMPTS = ["a photo of a dog", "a diagram", "Two CATS, sleeping!", "a photo of a red car"]


def tiny_openclip(quick_gelu: bool, seed: int = 0):
    """An OpenCLIP CLIP: image 32 px in 8-px patches, 2 × 2 blocks, OpenAI's vocabulary."""
    torch.manual_seed(seed)
    model = open_clip.CLIP(
        embed_dim=16,
        vision_cfg={"image_size": 32, "patch_size": 8, "width": 128, "layers": 2,
                    "head_width": 64},
        text_cfg={"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 1,
                  "layers": 2},
        quick_gelu=quick_gelu,
    ).eval()  # fmt: skip
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name or name.endswith("embedding"):
                p.normal_(0.0, 0.2)
                if "ln_" in name and name.endswith("weight"):
                    p.add_(1.0)
        model.logit_scale.fill_(2.0)
    return model


@pytest.fixture(scope="module", params=[True, False], ids=["quick_gelu", "gelu"])
def openclip_file(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    from safetensors.torch import save_file

    model = tiny_openclip(request.param)
    path = tmp_path_factory.mktemp("openclip") / "open_clip_model.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    sidecar = path.with_name(path.name + ".vitviz.json")
    sidecar.write_text(json.dumps({"quick_gelu": request.param}))
    return path, model


def test_logits_attention_and_embeddings_equal_open_clip(openclip_file, photo_files) -> None:
    path, reference = openclip_file
    loaded = load_checkpoint(path)
    assert kind_of(loaded).name == "clip" and loaded.family == "openclip"
    assert kind_of(loaded).apply_prompts(loaded, PROMPTS) is None
    a = analyze(loaded, photo_files["chelsea"])
    x = a.input[None]
    with torch.no_grad():
        image = reference.encode_image(x, normalize=True)
        text = reference.encode_text(open_clip.tokenize(PROMPTS), normalize=True)
        logits = reference.logit_scale.exp() * image @ text.T
    torch.testing.assert_close(a.logits, logits[0], rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model.image_embedding(x), image, rtol=1e-4, atol=1e-5)
    # the image tower's attention: open_clip's blocks run nn.MultiheadAttention; each block's
    # attention input is kept, then the module itself is asked for its weights per head
    inputs = []
    blocks = reference.visual.transformer.resblocks
    hooks = [
        b.attn.register_forward_pre_hook(lambda m, args: inputs.append((m, args[0])))
        for b in blocks
    ]
    try:
        with torch.no_grad():
            reference.encode_image(x)
    finally:
        for h in hooks:
            h.remove()
    seen = []
    with torch.no_grad():
        for module, q in inputs:
            _, w = module(q, q, q, need_weights=True, average_attn_weights=False)
            assert module.batch_first  # (B, N, D) in, (B, heads, N, N) out
            seen.append(w[0])
    assert len(seen) == len(a.attention) == 2
    for ours, theirs in zip(a.attention, seen, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_the_shipped_tokenizer_gives_open_clips_ids(openclip_file) -> None:
    path, _ = openclip_file
    loaded = load_checkpoint(path)
    tok = loaded.model.tokenizer
    prompts = [*PROMPTS, "it's a dog's life", "a  photo\tof   a dog", "x" * 400]
    theirs = open_clip.tokenize(prompts)
    for prompt, row in zip(prompts, theirs, strict=True):
        ids = [int(i) for i in row if int(i) != 0]
        assert tok.encode(prompt) == ids, prompt


def test_the_activation_must_be_said(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "bare.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_openclip(True).state_dict().items()}, str(path))
    with pytest.raises(CheckpointError, match="quick_gelu") as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)


def test_the_wrong_activation_gives_other_logits(openclip_file, photo_files, tmp_path) -> None:
    """The activation said matters: the other one is visibly off (so the tests above can fail)."""
    path, _ = openclip_file
    flipped = tmp_path / path.name
    flipped.write_bytes(path.read_bytes())
    said = json.loads(path.with_name(path.name + ".vitviz.json").read_text())["quick_gelu"]
    flipped.with_name(flipped.name + ".vitviz.json").write_text(
        json.dumps({"quick_gelu": not said})
    )
    right, wrong = load_checkpoint(path), load_checkpoint(flipped)
    for loaded in (right, wrong):
        kind_of(loaded).apply_prompts(loaded, PROMPTS)
    a, b = (analyze(m, photo_files["coffee"]) for m in (right, wrong))
    assert (a.logits - b.logits).abs().max() > 1e-3
