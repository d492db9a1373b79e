"""The intermediates accessor of the token-layout kinds (DESIGN §3): ViT, CaiT, XCiT and CLIP /
SigLIP towers opened from library checkpoints (random perturbed weights). Every block's output
equals the library's (timm's ``forward_intermediates`` and hooks on its class-attention blocks,
transformers' ``output_hidden_states``) in float64; the heads, concatenated and projected, are
each attention layer's output; a head replaced by itself changes nothing and a zeroed head is
the projection with that head's columns zeroed; bad replacements are refused."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import timm
import torch
from clip_fixtures import CORPUS, learn_bpe, save_openai_files, tiny_clip
from conftest import random_vit
from timm.models import save_for_hf
from torch import Tensor, nn
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.kindapi import OnRows, kind_of
from vitviz.kinds.vit import KIND as VIT
from vitviz.modelcode.adapter import CapturedModel, ModelCodeConfig
from vitviz.pipeline.analysis import analyze

SIDE = 32  # 4 × 4 patches of 8 px


@dataclass
class Case:
    """A checkpoint opened by vitviz, its library model and the library's block outputs
    (``reference(model, x)`` -> per block (patches (B, C, h, w), prefix (B, P, C)))."""

    loaded: object
    library: nn.Module
    reference: Callable[[nn.Module, Tensor], list[tuple[Tensor, Tensor]]]
    size: tuple[int, int] = (SIDE, SIDE)

    def images(self, batch: int, seed: int = 0) -> Tensor:
        return images(batch, *self.size, seed=seed)


def _timm_vit(folder: Path) -> Case:
    size = (SIDE, 48)  # 4 × 6 patches: rows and columns apart
    args = dict(img_size=size, patch_size=8, embed_dim=32, depth=2, num_heads=4, reg_tokens=2)
    torch.manual_seed(0)
    model = randomize_(timm.create_model("vit_tiny_patch16_224", num_classes=5, **args))
    save_for_hf(model, folder, model_args=args, safe_serialization=True)

    def reference(m: nn.Module, x: Tensor) -> list[tuple[Tensor, Tensor]]:
        return m.forward_intermediates(x, return_prefix_tokens=True, intermediates_only=True)

    return Case(load_checkpoint(folder), model, reference, size)


def _class_outputs(blocks: nn.ModuleList, m: nn.Module, x: Tensor) -> list[Tensor]:
    """The outputs of timm's class-attention ``blocks`` in a forward pass of ``m``."""
    seen: list[Tensor] = []
    handles = [b.register_forward_hook(lambda _m, _a, out: seen.append(out)) for b in blocks]
    try:
        m(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def _timm_cait(folder: Path) -> Case:
    args = dict(img_size=SIDE, patch_size=8, embed_dim=32, depth=2, depth_token_only=2,
                num_heads=4)  # fmt: skip
    torch.manual_seed(1)
    model = randomize_(timm.create_model("cait_xxs24_224", num_classes=5, **args), seed=1)
    path = folder / "cait.pth"
    torch.save(model.state_dict(), path)

    def reference(m: nn.Module, x: Tensor) -> list[tuple[Tensor, Tensor]]:
        patches = m.forward_intermediates(x, intermediates_only=True)
        none = x.new_zeros(x.shape[0], 0, patches[0].shape[1])
        cls = _class_outputs(m.blocks_token_only, m, x)  # (B, 1, C): the CLS alone
        return [(p, none) for p in patches] + [(patches[-1], c) for c in cls]

    return Case(load_checkpoint(path), model, reference)


def _timm_xcit(folder: Path) -> Case:
    args = dict(img_size=SIDE, embed_dim=32, depth=2, cls_attn_layers=2, num_heads=4)
    torch.manual_seed(2)
    model = randomize_(timm.create_model("xcit_tiny_12_p8_224", num_classes=5, **args), seed=2)
    g = torch.Generator().manual_seed(2)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(0.2 * torch.randn(m.running_mean.shape, generator=g))
            m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
    path = folder / "xcit.pth"
    torch.save(model.state_dict(), path)

    def reference(m: nn.Module, x: Tensor) -> list[tuple[Tensor, Tensor]]:
        patches = m.forward_intermediates(x, intermediates_only=True)
        none = x.new_zeros(x.shape[0], 0, patches[0].shape[1])
        tokens = _class_outputs(m.cls_attn_blocks, m, x)  # (B, 1 + P, C)
        return [(p, none) for p in patches] + [(_grid(t[:, 1:]), t[:, :1]) for t in tokens]

    return Case(load_checkpoint(path, config={"image_size": SIDE}), model, reference)


def _grid(tokens: Tensor) -> Tensor:
    """(B, h·w, C) square grid row-major -> (B, C, h, w)."""
    side = int(tokens.shape[1] ** 0.5)
    return tokens.transpose(1, 2).unflatten(-1, (side, side))


def _hidden_states(vision: Callable, prefix: int) -> Callable:
    def reference(m: nn.Module, x: Tensor) -> list[tuple[Tensor, Tensor]]:
        hidden = vision(m)(pixel_values=x, output_hidden_states=True).hidden_states[1:]
        return [(_grid(h[:, prefix:]), h[:, :prefix]) for h in hidden]

    return reference


def _hf_clip(folder: Path) -> Case:
    from transformers import CLIPImageProcessor

    vocab, merges = learn_bpe(CORPUS, merges=150)
    model = tiny_clip(len(vocab), seed=3)
    model.save_pretrained(folder)
    save_openai_files(folder, vocab, merges)
    CLIPImageProcessor(size={"shortest_edge": SIDE}, crop_size=SIDE).save_pretrained(folder)
    loaded = load_checkpoint(folder)
    assert kind_of(loaded).apply_prompts(loaded, ["a photo of a dog", "a red car"]) is None
    return Case(loaded, model, _hidden_states(lambda m: m.vision_model, 1))


def _hf_tower(folder: Path, siglip: bool) -> Case:
    from transformers import (
        CLIPVisionConfig,
        CLIPVisionModel,
        SiglipVisionConfig,
        SiglipVisionModel,
    )

    torch.manual_seed(4)
    config = (SiglipVisionConfig if siglip else CLIPVisionConfig)(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        image_size=SIDE, patch_size=8, attn_implementation="eager",
    )  # fmt: skip
    model = (SiglipVisionModel if siglip else CLIPVisionModel)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or "probe" in name:
                p.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    return Case(load_checkpoint(folder), model, _hidden_states(lambda m: m, 0 if siglip else 1))


BUILDERS = {
    "vit": _timm_vit,
    "cait": _timm_cait,
    "xcit": _timm_xcit,
    "clip": _hf_clip,
    "clip-tower": lambda folder: _hf_tower(folder, siglip=False),
    "siglip-tower": lambda folder: _hf_tower(folder, siglip=True),
}


@pytest.fixture(scope="module", params=list(BUILDERS))
def case(request, tmp_path_factory) -> Case:
    return BUILDERS[request.param](tmp_path_factory.mktemp(request.param))


def _run(case: Case, x: Tensor, model: nn.Module | None = None, **kw):
    with torch.no_grad():
        return kind_of(case.loaded).intermediates(model or case.loaded.model, x, **kw)


def _close(a: Tensor, b: Tensor, what: str, rtol: float = 1e-5) -> None:
    scale = max(float(b.abs().max()), 1e-12) if b.numel() else 1.0
    torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * scale, msg=lambda m: f"{what}: {m}")


def test_blocks_equal_the_librarys_in_float64(case: Case) -> None:
    ours = copy.deepcopy(case.loaded.model).double()
    library = copy.deepcopy(case.library).double()
    x = case.images(2).double()
    out = _run(case, x, ours)
    with torch.no_grad():
        reference = case.reference(library, x)
    assert len(out.blocks) == len(reference) == len(out.block_prefix) == len(out.block_grids)
    for i, (patches, prefix) in enumerate(reference):
        _close(out.blocks[i], patches, f"block {i}")
        _close(out.block_prefix[i], prefix, f"block {i}'s prefix tokens")
        grid = out.block_grids[i]
        assert grid.grid == tuple(patches.shape[-2:]) and grid.token_pixels == 8
        assert grid.num_prefix_tokens == prefix.shape[1]
    with torch.no_grad():
        _close(out.logits, ours(x)[:, : out.logits.shape[1]], "logits")


def test_heads_projected_are_each_attention_layers_output(case: Case, photo_files) -> None:
    """Hooks on the attention modules see what proj(concat heads) gives; the heads follow the
    kind's layer rows (count and heads per row) and their grids count their tokens."""
    model = case.loaded.model
    attention = [b.attn for b in model.blocks]
    seen: list[Tensor] = []
    handles = [a.register_forward_hook(lambda _m, _a, o: seen.append(o[0])) for a in attention]
    try:
        out = _run(case, case.images(2))
    finally:
        for h in handles:
            h.remove()
    rows = kind_of(case.loaded).layer_rows(analyze(case.loaded, photo_files["chelsea"]))
    assert len(out.heads) == len(rows) == len(seen) == len(out.head_grids)
    for layer, (heads, branch) in enumerate(zip(out.heads, seen, strict=True)):
        B, H, N, d = heads.shape
        assert rows[layer].heads == H and attention[layer].proj.in_features == d * H
        g = out.head_grids[layer]
        assert g.num_prefix_tokens + g.grid[0] * g.grid[1] == N
        with torch.no_grad():
            projected = attention[layer].proj(heads.transpose(1, 2).reshape(B, N, H * d))
        _close(projected, branch, f"layer {layer}", rtol=1e-6)


def _compared(out) -> list[Tensor]:
    """What a change inside shows in: the logits, the last block's patches and prefix."""
    return [out.logits, out.blocks[-1], out.block_prefix[-1]]


def test_a_head_replaced_by_itself_changes_nothing(case: Case) -> None:
    x = case.images(2, seed=1)
    first = _run(case, x)
    H = first.heads[0].shape[1]
    same = {(layer, (layer + 1) % H): first.heads[layer][:, (layer + 1) % H]
            for layer in range(len(first.heads))}  # fmt: skip
    again = _run(case, x, replace=same)
    assert again.replaced == tuple(sorted(same))
    for a, b in zip(_compared(again), _compared(first), strict=True):
        _close(a, b, "replaced by itself", rtol=1e-6)
    other = {(0, 0): first.heads[0][:, 1]}  # another head's output: a different pass
    moved = _run(case, x, replace=other)
    pairs = zip(_compared(moved), _compared(first), strict=True)
    assert any(not torch.allclose(a, b) for a, b in pairs)


def test_a_zeroed_head_is_its_projection_columns_zeroed(case: Case) -> None:
    x = case.images(2, seed=2)
    plain = _run(case, x)
    for layer, heads in enumerate(plain.heads):
        head, d = (layer + 1) % heads.shape[1], heads.shape[-1]
        ablated = _run(case, x, replace={(layer, head): None})
        assert not ablated.heads[layer][:, head].any()
        by_hand = copy.deepcopy(case.loaded.model)
        with torch.no_grad():
            by_hand.blocks[layer].attn.proj.weight[:, head * d : (head + 1) * d] = 0.0
        reference = _run(case, x, by_hand)
        for a, b in zip(_compared(ablated), _compared(reference), strict=True):
            _close(a, b, f"layer {layer} head {head} zeroed")
        pairs = zip(_compared(ablated), _compared(plain), strict=True)
        changed = any(not torch.allclose(a, b) for a, b in pairs)
        assert changed, f"zeroing layer {layer} head {head} changed nothing"


def test_bad_replacements_are_refused_and_the_model_is_left_as_it_was(case: Case) -> None:
    x = case.images(1)
    first = _run(case, x)
    L, (B, H, N, d) = len(first.heads), first.heads[-1].shape
    bad = {
        "layer": ({(L, 0): None}, "layer"),
        "negative layer": ({(-1, 0): None}, "layer"),
        "head": ({(L - 1, H): None}, "head"),
        "negative head": ({(0, -1): None}, "head"),
        "tokens": ({(L - 1, 0): torch.zeros(B, N + 1, d)}, "head_dim"),
        "width": ({(L - 1, 0): torch.zeros(B, N, d + 1)}, "head_dim"),
        "batch": ({(L - 1, 0): torch.zeros(B + 1, N, d)}, "head_dim"),
        "value": ({(L - 1, 0): 0.0}, "None"),
        "key": ({(L - 1,): None}, "layer, head"),
        "index": ({(0.0, 0): None}, "two ints"),
        "row": ({(L - 1, 0): OnRows(torch.tensor([B]))}, "rows"),
        "rows": ({(L - 1, 0): OnRows(torch.zeros(1, 1, dtype=torch.long))}, "rows"),
        "row's value": ({(L - 1, 0): OnRows(torch.tensor([0]), torch.zeros(2, N, d))}, "R, N"),
    }
    for what, (replace, words) in bad.items():
        with pytest.raises(ValueError, match=words):
            _run(case, x, replace=replace)
        assert not case.loaded.model.blocks[L - 1].attn.proj._forward_pre_hooks, what
    _close(_run(case, x).logits, first.logits, "after the refusals", rtol=0)


def test_a_parallel_blocks_heads_are_read_at_its_attention_projection() -> None:
    """vitviz's ParallelBlock (attention beside the MLP): a zeroed head equals its columns of
    ``attn_out_proj`` zeroed."""
    model = random_vit(parallel=True, depth=2, heads=2)
    x = images(2, SIDE, SIDE)
    with torch.no_grad():
        plain = VIT.intermediates(model, x)
        ablated = VIT.intermediates(model, x, replace={(1, 1): None})
        by_hand = copy.deepcopy(model)
        by_hand.blocks[1].attn_out_proj.weight[:, 16:] = 0.0
        reference = VIT.intermediates(by_hand, x)
    assert plain.heads[1].shape == (2, 2, 17, 16)
    _close(ablated.logits, reference.logits, "parallel block zeroed head")
    assert not torch.allclose(ablated.logits, plain.logits)


def test_a_model_from_the_users_code_is_refused_with_the_reason() -> None:
    model = CapturedModel(nn.Linear(4, 3), ModelCodeConfig((32, 32), 8, 3, 2, 2, 16, 1))
    with pytest.raises(ValueError, match="your own code"):
        VIT.intermediates(model, images(1, SIDE, SIDE))


def test_a_prompt_head_keeps_the_analysiss_image_embedding(case: Case, photo_files) -> None:
    """A CLIP's or SigLIP's prompt head keeps each pass's image embedding (new prompts rescore
    it): a pass of the accessor leaves the analysis's there (other kinds keep none)."""
    head = case.loaded.model.head
    analyze(case.loaded, photo_files["chelsea"])
    kept = getattr(head, "last_embedding", None)
    assert (kept is not None) == (kind_of(case.loaded).name == "clip")
    _run(case, case.images(2))
    assert getattr(head, "last_embedding", None) is kept
