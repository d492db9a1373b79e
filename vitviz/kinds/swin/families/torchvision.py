"""torchvision ``SwinTransformer`` state dicts (swin_t/s/b and swin_v2_t/s/b, any size).

Keys: ``features.0.{0: Conv2d, 2: LayerNorm}`` (patch embedding), ``features.{2s+1}.{j}``
(blocks of stage s: ``norm1``, ``attn.qkv``, ``attn.proj``, ``attn.relative_position_bias_table``,
``attn.relative_position_index``, ``norm2``, ``mlp.0``, ``mlp.3``), ``features.{2s}.{norm,
reduction}`` (patch merging before stage s), ``norm``, ``head``. v2 blocks hold
``attn.logit_scale``, ``attn.cpb_mlp.{0, 2}`` and the ``attn.relative_coords_table`` buffer
instead of the bias table. Widths, heads and window sizes are read off the weights.
torchvision pads a map to whole windows and keeps the window when the map is smaller (no shift
along an axis the window covers).
"""

from __future__ import annotations

from torch import Tensor

from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import IMAGENET_MEAN, IMAGENET_STD, Taker
from vitviz.checkpoints.preprocessing import crop_pct_for
from vitviz.kinds.swin.families.common import (
    check_numbering,
    finish_swin,
    infer_stages,
    refuse_leftovers,
    stage_blocks,
    take_block,
)

LOOKS_LIKE = "a torchvision Swin Transformer"
_BLOCK = r"features\.(\d+)\.(\d+)\.norm1\.weight$"
_NAMES = {
    "norm1": ("norm1",),
    "attn.qkv": ("attn.qkv",),
    "attn.proj": ("attn.proj",),
    "norm2": ("norm2",),
    "mlp.fc1": ("mlp.0",),
    "mlp.fc2": ("mlp.3",),
}
# torchvision's weights resize to these before the crop: (version, width, depths) -> (resize, crop)
_RESIZE = {
    (1, 96, (2, 2, 6, 2)): (232, 224),
    (1, 96, (2, 2, 18, 2)): (246, 224),
    (1, 128, (2, 2, 18, 2)): (238, 224),
    (2, 96, (2, 2, 6, 2)): (260, 256),
    (2, 96, (2, 2, 18, 2)): (260, 256),
    (2, 128, (2, 2, 18, 2)): (272, 256),
}
_V2 = ("attn.logit_scale", "attn.cpb_mlp.0.weight", "attn.cpb_mlp.0.bias", "attn.cpb_mlp.2.weight")


def detect(source: Source) -> bool:
    s = source.state
    return "features.0.0.weight" in s and (
        "features.1.0.attn.relative_position_bias_table" in s
        or "features.1.0.attn.cpb_mlp.0.weight" in s
    )


def convert(source: Source) -> Conversion:
    t = Taker(source, LOOKS_LIKE)
    out: dict[str, Tensor] = {}
    notes: list[str] = []
    found = stage_blocks(t.state, _BLOCK)
    check_numbering(source, found, [2 * s + 1 for s in range(len(found))])
    depths: list[int] = []
    windows: list[int] = []  # v2: from the offsets buffer
    for s, (feature, blocks) in enumerate(found.items()):
        depths.append(len(blocks))
        for j in blocks:
            old, new = f"features.{feature}.{j}.", f"stages.{s}.blocks.{j}."
            take_block(t, old, new, _NAMES, out)
            table = t.maybe(old + "attn.relative_position_bias_table")
            if table is not None:
                out[new + "attn.relative_position_bias_table"] = table
            else:
                for part in _V2:
                    out[new + part] = t.take(old + part)
                coords = t.maybe(old + "attn.relative_coords_table")  # (1, 2w−1, 2w−1, 2)
                if coords is not None and len(windows) == s:
                    windows.append((coords.shape[1] + 1) // 2)
            t.drop([old + "attn.relative_position_index"])
        if s > 0:
            merge = f"features.{2 * s}."
            out[f"stages.{s}.merge.norm.weight"] = t.take(merge + "norm.weight")
            out[f"stages.{s}.merge.norm.bias"] = t.take(merge + "norm.bias")
            out[f"stages.{s}.merge.reduction.weight"] = t.take(merge + "reduction.weight")
    out["patch_embed.proj.weight"] = patch = t.take("features.0.0.weight")  # (D, C, p, p)
    out["patch_embed.proj.bias"] = t.take("features.0.0.bias")
    out["patch_embed.norm.weight"] = t.take("features.0.2.weight")
    out["patch_embed.norm.bias"] = t.take("features.0.2.bias")
    out["norm.weight"] = t.take("norm.weight")
    out["norm.bias"] = t.take("norm.bias")
    num_classes = 0
    if "head.weight" in t:
        out["head.weight"] = t.take("head.weight")
        out["head.bias"] = t.take("head.bias")
        num_classes = out["head.weight"].shape[0]
    refuse_leftovers(t)

    v2 = "stages.0.blocks.0.attn.logit_scale" in out
    if v2 and len(windows) != len(depths):
        windows = [8] * len(depths)
        notes.append(
            f"window 8 assumed (torchvision's swin_v2); set window_sizes in "
            f"{source.sidecar_name} if yours differs"
        )
    inferred = infer_stages(out, depths, windows if v2 else None, where=source.name)
    version = inferred.get("version", 1)
    resize, crop = _RESIZE.get((version, inferred["dims"][0], tuple(depths)), (0, 0))
    if not resize:
        resize, crop = (232, 224) if version == 1 else (260, 256)
        notes.append(
            f"preprocessing assumed: resize {resize}, centre crop {crop} (torchvision's "
            f"{'swin_t' if version == 1 else 'swin_v2_t'}); set preprocessing in "
            f"{source.sidecar_name} if the model was trained otherwise"
        )
    inferred.update(
        image_size=(crop, crop),
        patch_size=patch.shape[-1],
        in_channels=patch.shape[1],
        num_classes=num_classes,
        norm_eps=1e-5,
        shift_first=False,
        window_clamp="none",
        pad_image=False,
    )
    prep = {
        "resize": "crop",
        "crop_pct": crop_pct_for(crop, resize),
        "interpolation": "bicubic",
        "mean": IMAGENET_MEAN,
        "std": IMAGENET_STD,
    }
    return finish_swin(
        source,
        family="torchvision-swin",
        inferred=inferred,
        state=out,
        class_names=None,
        preprocessing=prep,
        notes=notes,
        imagenet_if_1000=True,
    )


FAMILY = Family(
    "torchvision-swin",
    detect,
    convert,
    info=FamilyInfo(
        label="torchvision Swin, Swin v2",
        names="swin_t, swin_s, swin_b, swin_v2_t, swin_v2_s, swin_v2_b (any size)",
        forms="state dict (.pth, .safetensors)",
        parts=(
            "(shifted) window attention with a relative position bias",
            "v2: cosine attention, continuous position bias, residual post-norm",
            "patch merging between stages",
            "mean pooling",
            "Conv2d patch embedding",
        ),
    ),
)
