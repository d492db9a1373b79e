"""torchvision ``VisionTransformer`` state dicts (vit_b_16, vit_b_32, vit_l_16, vit_l_32, vit_h_14,
any size): ``conv_proj``, ``class_token``, ``encoder.pos_embedding``,
``encoder.layers.encoder_layer_N.{ln_1, self_attention, ln_2, mlp.0/3}``, ``encoder.ln``,
``heads.head`` and ``heads.pre_logits`` (-> head_hidden_dim + tanh). The old MLP names
``mlp.linear_1/2`` are read too. nn.MultiheadAttention's in_proj is already vitviz's fused qkv.
"""

from __future__ import annotations

from torch import Tensor

from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    block_indices,
    check_depth,
    example_heads,
    finish,
    grid_from_table,
)
from vitviz.checkpoints.preprocessing import torchvision_preprocessing

LOOKS_LIKE = "a torchvision ViT"
_LAYER = "encoder.layers.encoder_layer_"
# torchvision's named ViTs: width -> heads (vit_b: 768/12, vit_l: 1024/16, vit_h: 1280/16).
_NAMED_HEADS = {768: 12, 1024: 16, 1280: 16}


def detect(source: Source) -> bool:
    s = source.state
    return "conv_proj.weight" in s and "class_token" in s and "encoder.pos_embedding" in s


def convert(source: Source) -> Conversion:
    t = Taker(source, LOOKS_LIKE)
    notes: list[str] = []
    out: dict[str, Tensor] = {}
    depth = check_depth(source, block_indices(t.state, r"encoder\.layers\.encoder_layer_(\d+)\."))
    out["patch_embed.proj.weight"] = patch = t.take("conv_proj.weight")  # (D, C, p, p)
    D, C, p, _ = patch.shape
    out["patch_embed.proj.bias"] = t.take("conv_proj.bias")
    out["cls_token"] = t.take("class_token")
    out["pos_embed"] = pos = t.take("encoder.pos_embedding")  # (1, 1 + P, D)
    for i in range(depth):
        a, b = f"{_LAYER}{i}.", f"blocks.{i}."
        for new, old in (
            ("norm1", "ln_1"),
            ("norm2", "ln_2"),
            ("attn.proj", "self_attention.out_proj"),
            ("mlp.fc1", "mlp.0"),
            ("mlp.fc2", "mlp.3"),
        ):
            legacy = {"mlp.0": "mlp.linear_1", "mlp.3": "mlp.linear_2"}.get(old, old)
            for kind in ("weight", "bias"):
                out[f"{b}{new}.{kind}"] = t.take(f"{a}{old}.{kind}", f"{a}{legacy}.{kind}")
        out[b + "attn.qkv.weight"] = t.take(a + "self_attention.in_proj_weight")
        out[b + "attn.qkv.bias"] = t.take(a + "self_attention.in_proj_bias")
    hidden = out["blocks.0.mlp.fc1.weight"].shape[0]
    out["norm.weight"] = t.take("encoder.ln.weight")
    out["norm.bias"] = t.take("encoder.ln.bias")
    head_hidden = None
    if "heads.pre_logits.weight" in t:
        out["pre_logits.0.weight"] = t.take("heads.pre_logits.weight")
        out["pre_logits.0.bias"] = t.take("heads.pre_logits.bias")
        head_hidden = out["pre_logits.0.weight"].shape[0]
        notes.append("heads.pre_logits (Linear + tanh) kept as the head's hidden layer")
    num_classes = 0
    if "heads.head.weight" in t:
        out["head.weight"] = t.take("heads.head.weight")
        out["head.bias"] = t.take("heads.head.bias")
        num_classes = out["head.weight"].shape[0]
    t.refuse_leftovers()

    inferred = dict(
        patch_size=p,
        in_channels=C,
        dim=D,
        depth=depth,
        num_classes=num_classes,
        mlp_hidden_dim=hidden,
        norm_eps=1e-6,
        activation="gelu",
        head_hidden_dim=head_hidden,
    )
    grid = grid_from_table(pos.shape[1] - 1)
    if grid is not None:
        inferred["image_size"] = (grid[0] * p, grid[1] * p)
    if D in _NAMED_HEADS:
        inferred["heads"] = _NAMED_HEADS[D]
        if "heads" not in source.user:
            notes.append(
                f"heads {_NAMED_HEADS[D]} assumed (torchvision's ViT of width {D}); "
                f"set heads in {source.sidecar_name} if yours differs"
            )
    size = source.user.get("image_size", inferred.get("image_size", (224, 224)))
    size = (size, size) if isinstance(size, int) else tuple(size)
    return finish(
        source,
        family="torchvision",
        looks_like=LOOKS_LIKE,
        inferred=inferred,
        required={"heads": example_heads(D), "image_size": 224},
        state=out,
        class_names=None,
        preprocessing=torchvision_preprocessing(size),
        notes=notes,
        imagenet_if_1000=True,
    )


FAMILY = Family(
    "torchvision",
    detect,
    convert,
    info=FamilyInfo(
        label="torchvision ViT",
        names="vit_b_16, vit_b_32, vit_l_16, vit_l_32, vit_h_14 (any image size)",
        forms="state dict (.pth, .safetensors)",
        parts=(
            "attention",
            "pre-norm blocks",
            "GELU MLP",
            "learnt position table",
            "CLS token",
            "optional pre-logits Linear + tanh",
            "Conv2d patch embedding",
        ),
    ),
)
