"""Shared by the checkpoint-zoo tests: random weights for reference models, inputs, comparisons."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import Tensor, nn

LOGIT_ATOL = 1e-4
ATTN_ATOL = 1e-5


def tiny_torchvision_vit(num_classes: int = 2) -> nn.Module:
    """A one-layer torchvision ViT: 32 px, patch 8, 2 heads, width 32 (random weights)."""
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        image_size=32,
        patch_size=8,
        num_layers=1,
        num_heads=2,
        hidden_dim=32,
        mlp_dim=64,
        num_classes=num_classes,
    )


def randomize_(
    model: nn.Module, seed: int = 0, scale: float = 0.2, noise_dtype: torch.dtype = torch.float64
) -> nn.Module:
    """Every parameter random (LayerNorm weights and layer scales around 1), model in eval mode.

    Big enough for peaked attention and distinct logits; small enough to stay well conditioned.
    ``noise_dtype`` float32 draws big models' noise faster (other numbers, same kind).
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=noise_dtype).to(p.dtype)
            leaf = name.rsplit(".", 1)[-1]
            is_norm_weight = leaf == "weight" and p.ndim == 1 and "norm" in name.lower()
            is_norm_weight = is_norm_weight or (
                leaf == "weight"
                and p.ndim == 1
                and ("ln" in name or "layer_norm" in name or "layernorm" in name)
            )
            offset = 1.0 if is_norm_weight or leaf in ("gamma", "lambda1") else 0.0
            p.copy_(offset + scale * noise)
    return model.eval()


def randomize_stem_(model: nn.Module, seed: int) -> nn.Module:
    """After ``randomize_``, a hybrid ViT's convolutional backbone (``patch_embed.backbone``;
    a model without one is returned as it is) at its own scale: convs ~ N(0, 1/fan_in) (so 50
    layers neither vanish nor overflow), norm weights around 1, BatchNorm running means and
    variances random (``randomize_`` perturbs parameters, not buffers)."""
    backbone = getattr(getattr(model, "patch_embed", None), "backbone", None)
    if not isinstance(backbone, nn.Module):
        return model
    g = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():
        for m in backbone.modules():
            if isinstance(m, nn.Conv2d):
                w = torch.randn(m.weight.shape, generator=g)
                m.weight.copy_(w / m.weight[0].numel() ** 0.5)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.copy_(0.3 * torch.randn(m.running_mean.shape, generator=g))
                    m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
    return model.eval()


def images(b: int, h: int, w: int, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randn(b, 3, h, w, generator=g)


def max_diff(a: Tensor, b: Tensor) -> float:
    return float((a.detach().double() - b.detach().double()).abs().max())


def ours(loaded, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """Logits (fused path) and per-layer attention (capture path) of a loaded model."""
    with torch.no_grad():
        logits = loaded.model(x)
        out = loaded.model.forward_explained(x, capture_attention=True, hidden_states=True)
    assert max_diff(out.logits, logits) < 1e-5, "capture path differs from the fused path"
    return logits, out.attentions


def assert_close(name: str, a: Tensor, b: Tensor, atol: float) -> float:
    assert a.shape == b.shape, f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    d = max_diff(a, b)
    log = os.environ.get("VITVIZ_ZOO_DIFFS")  # optional: collect every difference for a report
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}\t{name}\t{d:.3g}\n")
    assert d <= atol, f"{name}: max difference {d:.3g} > {atol}"
    return d


def assert_attention(ref: list[Tensor], got: list[Tensor]) -> float:
    assert len(ref) == len(got) and ref, "no attention to compare"
    return max(
        assert_close(f"attention layer {i}", r, g, ATTN_ATOL)
        for i, (r, g) in enumerate(zip(ref, got, strict=True))
    )


def mha_attention(mha: nn.MultiheadAttention, x: Tensor) -> Tensor:
    """Per-head attention probabilities (B, H, N, N) of ``mha`` on ``x`` as the module gets it
    ((B, N, D) batch-first, else (N, B, D))."""
    with torch.no_grad():
        _, w = mha(x, x, x, need_weights=True, average_attn_weights=False)
    return w


def capture_inputs(modules: list[nn.Module]) -> tuple[list[Tensor], list]:
    """Record the first positional input of each module on the next forward (hooks removed by
    the caller through the returned handles)."""
    seen: list[Tensor] = []
    handles = [
        m.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach())) for m in modules
    ]
    return seen, handles


def timm_reference(
    model: nn.Module, x: Tensor, features: bool = False
) -> tuple[Tensor, list[Tensor]]:
    """timm's logits (or ``forward_features`` output) and its attention per block, taken from
    the explicit path (fused attention off) by a hook on each block's attention dropout; a
    block of several branches (ParallelThingsBlock): its branches' heads side by side."""
    attn: list[Tensor] = []
    branch: list[Tensor] = []
    handles = []

    def joined(*_args: object) -> None:  # a block of several branches has run
        attn.append(torch.cat(branch, dim=1))
        branch.clear()

    for block in model.blocks:
        if hasattr(block, "attns"):
            for b in block.attns:
                b.attn.fused_attn = False
                handles.append(
                    b.attn.attn_drop.register_forward_hook(
                        lambda _m, _i, out: branch.append(out.detach())
                    )
                )
            handles.append(block.register_forward_hook(joined))
            continue
        a = getattr(block, "attn", block)  # a parallel block attends itself
        a.fused_attn = False
        handles.append(
            a.attn_drop.register_forward_hook(lambda _m, _i, out: attn.append(out.detach()))
        )
    with torch.no_grad():
        out = model.forward_features(x) if features else model(x)
    for h in handles:
        h.remove()
    return out, attn


def assert_attribution_offered(analysis, target=None) -> None:
    """Transformer attribution is offered for the analysis's model and the method gives the
    explain function's map, with structure (its rules per part are checked in float64 against
    references in tests/explain/test_explain_attribution_parts.py)."""
    from vitviz.explain import transformer_attribution
    from vitviz.explain.methods import get_method

    method = get_method("transformer-attribution")
    assert method.unavailable(analysis) is None
    got = method(analysis, None, target, {})
    model = analysis.loaded.model
    p = next(model.parameters())
    want = transformer_attribution(model, analysis.input[None].to(p), target)[0]
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.isfinite(got).all() and got.std() > 0.01


def assert_probe_maps(analysis, A, G, a_p, g_p) -> None:
    """The analysis's rollout, gradient rollout and relevance (no query) start from the
    attention pool's probe row, each written from its definition in float64: A, G the layers'
    attentions and gradients, L × (H, N, N); a_p, g_p the probe's attention and gradient (H', N)
    over every token (0 on the tokens the pool doesn't read). Maps over a 4 × 4 grid."""
    P = analysis.num_prefix_tokens
    eye = torch.eye(a_p.shape[-1], dtype=torch.float64)

    def patches(r: Tensor) -> Tensor:
        return r[P:].reshape(4, 4)

    def chain(s: Tensor, layers: list[Tensor]) -> Tensor:  # s · Ã_L ⋯ Ã_1, Ã = rownorm(M + I)
        for m in reversed(layers):
            t = m + eye
            s = s @ (t / t.sum(-1, keepdim=True))
        return patches(s) / patches(s).max()

    # rollout: s = mean_h(A_p); M_l = mean_h(A_l)
    want = chain(a_p.mean(0), [layer.mean(0) for layer in A])
    torch.testing.assert_close(analysis.rollout().double(), want, rtol=0, atol=1e-5)
    # gradient rollout: s = (mean_h(A_p ⊙ G_p))⁺; M_l = (mean_h(A_l ⊙ G_l))⁺
    weighted = [(layer * grad).mean(0).clamp_min(0) for layer, grad in zip(A, G, strict=True)]
    want = chain((a_p * g_p).mean(0).clamp_min(0), weighted)
    torch.testing.assert_close(analysis.gradient_rollout().double(), want, rtol=0, atol=1e-5)
    # relevance: s = mean_h((G_p ⊙ A_p)⁺); s · (I + Ā_L) ⋯ (I + Ā_1), min-max over the patches
    r = (g_p * a_p).clamp_min(0).mean(0)
    for layer, grad in zip(reversed(A), reversed(G), strict=True):
        r = r @ (eye + (grad * layer).clamp_min(0).mean(0))
    m = patches(r)
    want = (m - m.min()) / (m.max() - m.min())
    torch.testing.assert_close(analysis.relevance().double(), want, rtol=0, atol=1e-5)


def assert_timm_relevance_maps(analysis, model: nn.Module, target: int, atol: float = 1e-5):
    """The analysis's relevance and gradient rollout (no query) against float64 references
    from their definitions (DESIGN §5) on timm ``model``'s own attention with its autograd:
    relevance R = I + Σ Ā_l R, Ā_l = E_h[(∇A ⊙ A)⁺], min-max; gradient rollout's chain of
    rownorm((E_h[∇A ⊙ A])⁺ + I), max 1. The query row is CLS, or without a prefix token the
    mean of the patch queries' rows. Maps over a 4 × 4 grid; ``model`` is made float64."""
    from vitviz.explain.methods import get_method

    P = analysis.num_prefix_tokens
    ref = model.double()
    kept = []
    for block in ref.blocks:
        block.attn.fused_attn = False
        block.attn.attn_drop.register_forward_hook(lambda _m, _i, o: kept.append(o) or o)
    logits = ref(analysis.input[None].double())
    for t in kept:
        t.retain_grad()
    logits[0, target].backward()
    eye = torch.eye(kept[0].shape[-1], dtype=torch.float64)
    R, chain = eye.clone(), eye.clone()
    for t in kept:
        cam = (t.grad[0] * t[0]).detach()
        R = R + cam.clamp(min=0).mean(0) @ R
        m = cam.mean(0).clamp(min=0) + eye
        chain = (m / m.sum(-1, keepdim=True)) @ chain

    def row(M: Tensor) -> Tensor:
        r = M[0] if P else M[P:].mean(0)  # the CLS row, or the mean of the patch queries
        return r[P:].reshape(4, 4)

    want = row(R)
    want = (want - want.min()) / (want.max() - want.min())
    ours = get_method("relevance")(analysis, None, target, {}).double()
    torch.testing.assert_close(ours, want, rtol=1e-5, atol=atol)
    roll = row(chain)
    assert roll.max() > 0.01  # the query row reaches the patches
    ours = get_method("gradient-rollout")(analysis, None, target, {}).double()
    torch.testing.assert_close(ours, roll / roll.max(), rtol=1e-5, atol=atol)


def save_timm_folder(model: nn.Module, folder: Path, **model_args) -> Path:
    """timm's own folder (config.json + model.safetensors), ``model_args`` (if any) in its
    config.json."""
    from timm.models import save_for_hf

    save_for_hf(model, folder, safe_serialization=True, model_args=model_args or None)
    return folder


def save_bare(model: nn.Module, path: Path, settings: dict | None = None) -> Path:
    """torch.save of the state dict, ``settings`` (if any) in its sidecar."""
    torch.save(model.state_dict(), path)
    if settings is not None:
        path.with_name(path.name + ".vitviz.json").write_text(json.dumps(settings))
    return path


class Softmaxes(torch.overrides.TorchFunctionMode):
    """Every softmax's output while active, in order (a timm model whose only softmaxes are its
    attention's: each attention's probabilities)."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in (torch.Tensor.softmax, torch.softmax, torch.nn.functional.softmax):
            self.out.append(result)
        return result
