"""The attention methods of the method table (DESIGN §5: raw attention, rollout with its fusions,
discard and start layer, gradient rollout, relevance, Grad-SAM, Grad-CAM on attention, DINO
masks) through ``get_method`` on timm ViTs opened by vitviz (a CLS, a CLS and two registers,
no CLS with a mean-pooled head), equal to full-matrix float64 references written here.

A_l and G_l = ∂y_c/∂A_l come from the test's own forward pass over timm's parameters (blocks
written out; its logits equal timm's), not from vitviz; the references build every N × N
product in full, where vitviz propagates one row (and, for rollout, protects the query's own
entry by a closed form)."""

from __future__ import annotations

import json
import math

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.models import save_for_hf
from torch import Tensor, nn
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze

SIZE = (24, 40)  # 3 × 5 patches of 8: non-square on purpose
GH, GW = 3, 5
CASES = {
    "cls": dict(class_token=True, reg_tokens=0, global_pool="token"),
    "cls+registers": dict(class_token=True, reg_tokens=2, global_pool="token"),
    "no cls": dict(class_token=False, reg_tokens=0, global_pool="avg"),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    """(timm model float64, vitviz analysis, image (3, H, W), number of prefix tokens)."""
    args = dict(img_size=SIZE, patch_size=8, embed_dim=32, depth=3, num_heads=4)
    args.update(CASES[request.param])
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", num_classes=5, **args)
    randomize_(model, seed=11, scale=0.3)
    root = tmp_path_factory.mktemp("chains")
    save_for_hf(model, root / "vit", model_args=args, safe_serialization=True)
    (root / "vit.vitviz.json").write_text(json.dumps({}))
    loaded = load_checkpoint(root / "vit")
    image = images(1, *SIZE, seed=5)[0]
    return model.double().eval(), analyze(loaded, image), image, int(model.num_prefix_tokens)


def hand_forward(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """timm's ViT written out in float64 from its parameters: (logits (C,), L × (H, N, N)
    attention, each a node of the graph so ∂y/∂A_l can be asked for)."""
    attentions: list[Tensor] = []

    def tokens_in(_m, args):
        seen.append(args[0])

    seen: list[Tensor] = []
    handle = model.blocks[0].register_forward_pre_hook(tokens_in)
    try:
        with torch.no_grad():
            expected = model(x[None])[0]
    finally:
        handle.remove()
    t = seen[0].detach()  # (1, N, D): the embedding, which no definition is about
    for block in model.blocks:
        D = t.shape[-1]
        H = block.attn.num_heads
        hd = D // H
        y = F.layer_norm(t, (D,), block.norm1.weight, block.norm1.bias, block.norm1.eps)
        q, k, v = (y @ block.attn.qkv.weight.T + block.attn.qkv.bias).split(D, dim=-1)
        q, k, v = (z.unflatten(-1, (H, hd)).transpose(1, 2) for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)  # (1, H, N, N)
        attentions.append(a)
        o = (a @ v).transpose(1, 2).flatten(2)
        t = t + o @ block.attn.proj.weight.T + block.attn.proj.bias
        y = F.layer_norm(t, (D,), block.norm2.weight, block.norm2.bias, block.norm2.eps)
        y = F.gelu(y @ block.mlp.fc1.weight.T + block.mlp.fc1.bias)
        t = t + y @ block.mlp.fc2.weight.T + block.mlp.fc2.bias
    t = model.norm(t)
    P = model.num_prefix_tokens
    pooled = t[:, 0] if model.global_pool == "token" else t[:, P:].mean(dim=1)
    logits = model.head(model.fc_norm(pooled))[0]
    assert float((logits.detach() - expected).abs().max()) < 1e-10  # the hand pass is timm's
    return logits, attentions


def attention_and_gradients(model: nn.Module, x: Tensor, c: int) -> tuple[list, list, Tensor]:
    """L × (H, N, N) A_l and G_l = ∂y_c/∂A_l, and the logits, by the hand pass."""
    with torch.enable_grad():
        logits, attentions = hand_forward(model, x)
        grads = torch.autograd.grad(logits[c], attentions)
    return [a[0].detach() for a in attentions], [g[0] for g in grads], logits.detach()


# -- the references, full N × N matrices -------------------------------------------------------


def start_row(N: int, P: int, q: int | None) -> Tensor:
    """e_q, or the mean of the patch rows e_p without a CLS: (N,)."""
    r = torch.zeros(N, dtype=torch.float64)
    if q is None:
        r[P:] = 1.0 / (N - P)
    else:
        r[q] = 1.0
    return r


def discard(M: Tensor, ratio: float, protected: set[int]) -> Tensor:
    """M with its ⌊ratio·N²⌋ smallest entries (sorted in full) zeroed, the protected tokens'
    own entries kept."""
    N = M.shape[0]
    k = math.floor(ratio * N * N)
    out = M.clone()
    order = sorted(range(N * N), key=lambda f: float(M.flatten()[f]))
    for f in order[:k]:
        i, j = divmod(f, N)
        if not (i == j and i in protected):
            out[i, j] = 0.0
    return out


def rollout_matrix(fused: list[Tensor], ratio: float, start: int, protected: set[int]) -> Tensor:
    """R = Ã_L ⋯ Ã_s, Ã_l = rownorm(discard(Â_l) + I)."""
    N = fused[0].shape[0]
    eye = torch.eye(N, dtype=torch.float64)
    R = eye
    for M in fused[start:]:
        t = discard(M, ratio, protected) + eye
        R = (t / t.sum(dim=-1, keepdim=True)) @ R
    return R


def patch_grid(row: Tensor, P: int) -> Tensor:
    return row[P:].reshape(GH, GW)


def to_max(m: Tensor) -> Tensor:
    return m / m.max()


def min_max(m: Tensor) -> Tensor:
    return (m - m.min()) / (m.max() - m.min())


def query_of(patch: tuple[int, int] | None, P: int) -> int | None:
    if patch is None:
        return 0 if P > 0 else None
    return P + patch[0] * GW + patch[1]


def protected_for(q: int | None, N: int, P: int) -> set[int]:
    """The tokens whose own entry the discard keeps: the query; without a CLS, every patch (the
    start row is the mean of the patch rows)."""
    return set(range(P, N)) if q is None else {q}


def close(got: Tensor, ref: Tensor, what: str) -> None:
    assert got.shape == ref.shape, what
    err = float((got.double() - ref).abs().max())
    assert err < 2e-5, f"{what}: {err}"


PATCHES = (None, (1, 3))


@pytest.mark.parametrize("patch", PATCHES)
@pytest.mark.parametrize(
    ("fusion", "ratio", "start"), [("mean", 0.0, 0), ("max", 0.5, 0), ("min", 0.9, 1)]
)
def test_rollout_is_the_full_product(case, patch, fusion, ratio, start) -> None:
    model, analysis, image, P = case
    A, _, _ = attention_and_gradients(model, image.double(), 0)
    N = A[0].shape[-1]
    q = query_of(patch, P)
    fuse = {"mean": lambda a: a.mean(0), "max": lambda a: a.amax(0), "min": lambda a: a.amin(0)}
    fused = [fuse[fusion](a) for a in A]
    R = rollout_matrix(fused, ratio, start, protected_for(q, N, P))
    ref = to_max(patch_grid(start_row(N, P, q) @ R, P))
    params = dict(fusion=fusion, discard_ratio=ratio, start_layer=start)
    got = get_method("rollout")(analysis, patch, None, params)
    close(got, ref, f"rollout {params} {patch}")
    if ratio > 0:  # the discard changes this map: the comparison can fail
        plain = to_max(patch_grid(start_row(N, P, q) @ rollout_matrix(fused, 0.0, start, set()), P))
        assert float((plain - ref).abs().max()) > 1e-3


@pytest.mark.parametrize("patch", PATCHES)
@pytest.mark.parametrize(("ratio", "start"), [(0.0, 0), (0.4, 1)])
def test_gradient_rollout_and_relevance_are_the_full_products(case, patch, ratio, start) -> None:
    model, analysis, image, P = case
    c = int(analysis.logits.argmin())  # not the default class: the target is really used
    A, G, logits = attention_and_gradients(model, image.double(), c)
    assert float((analysis.logits.double() - logits).abs().max()) < 1e-4
    N = A[0].shape[-1]
    q = query_of(patch, P)
    e = start_row(N, P, q)

    fused = [(a * g).mean(0).clamp_min(0) for a, g in zip(A, G, strict=True)]
    R = rollout_matrix(fused, ratio, start, protected_for(q, N, P))
    params = dict(discard_ratio=ratio, start_layer=start)
    got = get_method("gradient-rollout")(analysis, patch, c, params)
    close(got, to_max(patch_grid(e @ R, P)), f"gradient rollout {params} {patch}")

    eye = torch.eye(N, dtype=torch.float64)
    R = eye
    for a, g in list(zip(A, G, strict=True))[start:]:  # R = R + Ā_l·R for l = s..L
        R = R + (g * a).clamp_min(0).mean(0) @ R
    got = get_method("relevance")(analysis, patch, c, dict(start_layer=start))
    close(got, min_max(patch_grid(e @ R, P)), f"relevance start {start} {patch}")


def query_rows(a: Tensor, q: int | None, P: int) -> Tensor:
    """(H, N, N) -> (H, N): row q, or the mean of the patch queries' rows."""
    return a[:, P:].mean(dim=1) if q is None else a[:, q]


@pytest.mark.parametrize("patch", PATCHES)
def test_grad_sam_and_attention_gradcam(case, patch) -> None:
    model, analysis, image, P = case
    q = query_of(patch, P)
    nonzero = 0
    for c in analysis.logits.argsort().tolist():  # every class, the default among them
        A, G, _ = attention_and_gradients(model, image.double(), c)
        L, H = len(A), A[0].shape[0]
        pairs = zip(A, G, strict=True)
        total = sum(query_rows(g.clamp_min(0) * a, q, P).sum(0) for a, g in pairs)
        ref = min_max(patch_grid(total / (L * H), P))
        close(get_method("grad-sam")(analysis, patch, c), ref, f"grad-sam {c} {patch}")

        a_rows = query_rows(A[-1], q, P)[:, P:]  # (H, patches)
        g_rows = query_rows(G[-1], q, P)[:, P:]
        cam = (a_rows * g_rows.mean(dim=1, keepdim=True)).mean(0).clamp_min(0)
        cam = cam.reshape(GH, GW)
        ref = min_max(cam) if cam.max() > 0 else cam  # a constant map: all zero
        nonzero += int(cam.max() > 0)
        got = get_method("attention-gradcam")(analysis, patch, c)
        close(got, ref, f"attention-gradcam {c} {patch}")
    if P > 0 and q != 0:  # the last layer's patch rows never reach the CLS readout: G = 0
        assert nonzero == 0 and float(G[-1][:, q].abs().max()) == 0.0
    else:
        assert nonzero >= 2  # not only the all-zero maps the ReLU can leave


@pytest.mark.parametrize("patch", PATCHES)
@pytest.mark.parametrize(("layer", "head", "threshold"), [(-1, -1, 0.6), (1, 2, 0.3)])
def test_raw_attention_and_dino_masks(case, patch, layer, head, threshold) -> None:
    model, analysis, image, P = case
    A, _, _ = attention_and_gradients(model, image.double(), 0)
    q = query_of(patch, P)
    rows = query_rows(A[layer], q, P)[:, P:]  # (H, patches)
    maps = rows.reshape(-1, GH, GW)
    ref = maps.mean(0) if head == -1 else maps[head]
    got = get_method("attention")(analysis, patch, None, dict(layer=layer, head=head))
    close(got, ref, f"attention {layer}.{head} {patch}")

    masks = []
    for values in rows:  # per head: the largest patches until their share reaches threshold
        share = values / values.sum()
        order = sorted(range(len(share)), key=lambda t: -float(share[t]))
        kept, mass = [], 0.0
        for t in order:
            if mass >= threshold:
                break
            kept.append(t)
            mass += float(share[t])
        mask = torch.zeros(GH * GW, dtype=torch.float64)
        mask[kept] = 1.0
        masks.append(mask.reshape(GH, GW))
    ref = masks[head] if head != -1 else torch.stack(masks).mean(0)
    params = dict(layer=layer, head=head, threshold=threshold)
    got = get_method("dino-masks")(analysis, patch, None, params)
    close(got, ref, f"dino-masks {params} {patch}")
