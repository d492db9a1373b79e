"""Activation patching (DESIGN §5, "Interventions") against a torchvision ViT written out here:
B's pass with head (l, h)'s slice of the attention output (A_h·V_h, before the output
projection) taken from A's clean pass; effect (y_c(patched) − y_c(B)) / (y_c(A) − y_c(B)),
c = A's top class. The hand pass never calls vitviz; every head's effect, by both pass plans
and in batches of one and of many rows, and a patch of heads in two layers at once, equal it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import Tensor, nn
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.pipeline.head_effects import patched_logits, patching_effects

LAYERS, HEADS = 3, 2


@pytest.fixture(scope="module")
def tv(tmp_path_factory):
    """(torchvision ViT float64, vitviz's model of its file, clean image A, corrupted image B)."""
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=LAYERS, num_heads=HEADS, hidden_dim=16,
        mlp_dim=32, num_classes=5,
    )  # fmt: skip
    randomize_(model, seed=21, scale=0.4)
    assert model.heads.head.weight.abs().min() > 0  # not torchvision's zero head
    path = tmp_path_factory.mktemp("patching") / "vit.pth"
    torch.save(model.state_dict(), path)
    a, b = images(2, 32, 32, seed=9)
    return model.double().eval(), load_checkpoint(path, config={"heads": HEADS}), a, b


def hand_pass(
    m: nn.Module, x: Tensor, patch: dict[tuple[int, int], Tensor] | None = None
) -> tuple[Tensor, list[Tensor]]:
    """torchvision's ViT by hand in float64: (logits (C,), L × (H, N, hd) each layer's heads'
    outputs A_h·V_h as computed), with ``patch`` {(layer, head): (N, hd)} put in their place."""
    x = x[None].double()
    t = F.conv2d(x, m.conv_proj.weight, m.conv_proj.bias, stride=m.patch_size)
    t = t.flatten(2).transpose(1, 2)
    t = torch.cat([m.class_token, t], dim=1) + m.encoder.pos_embedding
    heads_out = []
    for i, layer in enumerate(m.encoder.layers):
        mha = layer.self_attention
        H, D = mha.num_heads, t.shape[-1]
        hd = D // H
        y = F.layer_norm(t, (D,), layer.ln_1.weight, layer.ln_1.bias, layer.ln_1.eps)
        q, k, v = (y @ mha.in_proj_weight.T + mha.in_proj_bias).split(D, dim=-1)
        q, k, v = (z.unflatten(-1, (H, hd)).transpose(1, 2) for z in (q, k, v))
        o = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1) @ v  # (1, H, N, hd)
        heads_out.append(o[0].clone())
        for (pl, ph), value in (patch or {}).items():
            if pl == i:
                o[0, ph] = value
        t = t + o.transpose(1, 2).flatten(2) @ mha.out_proj.weight.T + mha.out_proj.bias
        y = F.layer_norm(t, (D,), layer.ln_2.weight, layer.ln_2.bias, layer.ln_2.eps)
        y = F.gelu(y @ layer.mlp[0].weight.T + layer.mlp[0].bias)
        t = t + y @ layer.mlp[3].weight.T + layer.mlp[3].bias
    ln = m.encoder.ln
    t = F.layer_norm(t, (t.shape[-1],), ln.weight, ln.bias, ln.eps)
    return (t[:, 0] @ m.heads.head.weight.T + m.heads.head.bias)[0], heads_out


def test_the_hand_pass_is_torchvisions(tv) -> None:
    model, _, a, _ = tv
    with torch.no_grad():
        got, _ = hand_pass(model, a)
        assert float((got - model(a[None].double())[0]).abs().max()) < 1e-10


@pytest.mark.parametrize(("plan", "batch"), [("per-layer", None), ("multi-layer", 1), (None, 3)])
def test_every_heads_effect_is_its_definition(tv, plan, batch) -> None:
    model, loaded, a, b = tv
    with torch.no_grad():
        ya, clean_heads = hand_pass(model, a)
        yb, _ = hand_pass(model, b)
        c = int(ya.argmax())
        want = torch.empty(LAYERS, HEADS, dtype=torch.float64)
        for layer in range(LAYERS):
            for head in range(HEADS):
                patched, _ = hand_pass(model, b, {(layer, head): clean_heads[layer][head]})
                want[layer, head] = (patched[c] - yb[c]) / (ya[c] - yb[c])
    got = patching_effects(loaded, a, b, plan=plan, batch=batch)
    assert got.target == c
    assert float((got.clean_logits.double() - ya).abs().max()) < 1e-4
    assert float((got.corrupted_logits.double() - yb).abs().max()) < 1e-4
    err = float((got.effect.double() - want).abs().max())
    assert err < 1e-4 * (1 + float(want.abs().max())), err
    assert float(want.abs().min()) > 1e-3  # every head moves the logit: the check can fail


def test_heads_of_two_layers_patched_at_once(tv) -> None:
    """A later layer's slice is A's clean one, not what it becomes below the earlier patch."""
    model, loaded, a, b = tv
    heads = [(0, 1), (2, 0)]
    with torch.no_grad():
        _, clean_heads = hand_pass(model, a)
        want, _ = hand_pass(model, b, {(i, h): clean_heads[i][h] for i, h in heads})
        chained, _ = hand_pass(model, b, {(0, 1): clean_heads[0][1]})
    got = patched_logits(loaded, a, b, heads)
    assert float((got.double() - want).abs().max()) < 1e-4 * (1 + float(want.abs().max()))
    assert float((chained - want).abs().max()) > 1e-3  # the second head's slice matters
