"""OpenCLIP state dicts (``visual.conv1``, ``visual.transformer.resblocks.N.attn.in_proj_weight``,
``visual.proj``, ``text_projection``, ``logit_scale``) -> a ``ClipImageModel``.

The shapes say the widths, depths, patch, input and context length; the heads follow OpenCLIP's
64-wide heads. They can't say the activation (OpenAI's weights use QuickGELU, LAION's GELU), so
the settings must: ``{"quick_gelu": true}`` or ``false`` in ``<file>.vitviz.json`` (or
``--config``). The tokenizer is the one the ``open_clip_torch`` package ships
(``bpe_simple_vocab_16e6.txt.gz``), read as data; without the package there are no prompts, and
a one-line message names the extra.

``visual.proj`` (D, E) and ``text_projection`` (W, E) multiply from the right (x @ P): their
transposes are vitviz's Linear weights.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import Tensor

from vitviz.blocks import ViTConfig
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.core.optional import FAMILIES_INSTALL
from vitviz.imaging import Preprocessing
from vitviz.kinds.clip.network import ClipConfig
from vitviz.kinds.clip.text import TextConfig

VOCAB_FILE = "bpe_simple_vocab_16e6.txt.gz"  # in the open_clip package
HEAD_WIDTH = 64
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]
_BLOCK = {"ln_1": "norm1", "attn.out_proj": "attn.proj", "ln_2": "norm2",
          "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2"}  # fmt: skip
_TEXT_BLOCK = {"ln_1": "norm1", "attn.out_proj": "out", "ln_2": "norm2",
               "mlp.c_fc": "fc1", "mlp.c_proj": "fc2"}  # fmt: skip


def detect(source: Source) -> bool:
    s = source.state
    return "visual.conv1.weight" in s and "visual.proj" in s and "visual.class_embedding" in s


def package_vocab_file() -> Path | None:
    """The BPE file the installed ``open_clip_torch`` ships, or None (not installed)."""
    spec = importlib.util.find_spec("open_clip")  # finds the package; runs none of its code
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / VOCAB_FILE
    return path if path.is_file() else None


def _depth(state: dict[str, Tensor], prefix: str) -> int:
    n = len(prefix)
    return 1 + max(int(k[n:].split(".")[0]) for k in state if k.startswith(prefix))


def _quick_gelu(source: Source) -> bool:
    value = source.user.get("quick_gelu")
    if not isinstance(value, bool):
        raise CheckpointError(
            f"{source.name}: an OpenCLIP state dict does not say its activation; set "
            f"\"quick_gelu\": true (OpenAI's weights) or false (LAION's and most others) in "
            f"{source.sidecar_name} or --config"
        )
    return value


def _vision(state: dict[str, Tensor], act: str) -> tuple[ViTConfig, dict[str, Tensor]]:
    conv = state.pop("visual.conv1.weight")
    D, C, p = int(conv.shape[0]), int(conv.shape[1]), int(conv.shape[-1])
    depth = _depth(state, "visual.transformer.resblocks.")
    pos = state.pop("visual.positional_embedding")
    side = round((pos.shape[0] - 1) ** 0.5) * p
    hidden = int(state["visual.transformer.resblocks.0.mlp.c_fc.weight"].shape[0])
    config = ViTConfig(
        image_size=(side, side), patch_size=p, in_channels=C, num_classes=0, dim=D,
        depth=depth, heads=max(1, D // HEAD_WIDTH), mlp_hidden_dim=hidden, pre_norm=True,
        norm_eps=1e-5, activation=act,
    )  # fmt: skip
    out = {
        "cls_token": state.pop("visual.class_embedding").reshape(1, 1, -1),
        "pos_embed": pos[None],
        "patch_embed.proj.weight": conv,
        "patch_embed.proj.bias": torch.zeros(D, dtype=conv.dtype),
        "norm_pre.weight": state.pop("visual.ln_pre.weight"),
        "norm_pre.bias": state.pop("visual.ln_pre.bias"),
        "norm.weight": state.pop("visual.ln_post.weight"),
        "norm.bias": state.pop("visual.ln_post.bias"),
        "head.projection.weight": state.pop("visual.proj").T,
    }
    for i in range(depth):
        b = f"visual.transformer.resblocks.{i}."
        out[f"blocks.{i}.attn.qkv.weight"] = state.pop(b + "attn.in_proj_weight")
        out[f"blocks.{i}.attn.qkv.bias"] = state.pop(b + "attn.in_proj_bias")
        for theirs, ours in _BLOCK.items():
            for part in ("weight", "bias"):
                out[f"blocks.{i}.{ours}.{part}"] = state.pop(f"{b}{theirs}.{part}")
    return config, out


def _text(state: dict[str, Tensor], act: str, embed_dim: int) -> tuple[TextConfig, dict]:
    emb = state.pop("token_embedding.weight")
    pos = state.pop("positional_embedding")
    width = int(emb.shape[1])
    depth = _depth(state, "transformer.resblocks.")
    config = TextConfig(
        vocab_size=int(emb.shape[0]), width=width, depth=depth,
        heads=max(1, width // HEAD_WIDTH),
        mlp_hidden=int(state["transformer.resblocks.0.mlp.c_fc.weight"].shape[0]),
        context_length=int(pos.shape[0]), embed_dim=embed_dim, end_id=int(emb.shape[0]) - 1,
        pool_argmax=True, activation=act,
    )  # fmt: skip
    out = {
        "text.token_embedding.weight": emb,
        "text.position_embedding": pos,
        "text.norm.weight": state.pop("ln_final.weight"),
        "text.norm.bias": state.pop("ln_final.bias"),
        "text.projection.weight": state.pop("text_projection").T,
    }
    for i in range(depth):
        b = f"transformer.resblocks.{i}."
        for part, key in (("weight", "in_proj_weight"), ("bias", "in_proj_bias")):
            q, k, v = state.pop(f"{b}attn.{key}").chunk(3)
            out.update({f"text.blocks.{i}.q.{part}": q, f"text.blocks.{i}.k.{part}": k,
                        f"text.blocks.{i}.v.{part}": v})  # fmt: skip
        for theirs, ours in _TEXT_BLOCK.items():
            for part in ("weight", "bias"):
                out[f"text.blocks.{i}.{ours}.{part}"] = state.pop(f"{b}{theirs}.{part}")
    return config, out


def convert(source: Source) -> Conversion:
    state = source.state
    act = "quick_gelu" if _quick_gelu(source) else "gelu"
    try:
        vit, out = _vision(state, act)
        embed_dim = int(out["head.projection.weight"].shape[0])
        out["head.logit_scale"] = state.pop("logit_scale", torch.tensor(0.0))
        text = None
        if "text_projection" in state and "token_embedding.weight" in state:
            text, text_state = _text(state, act, embed_dim)
            out.update(text_state)
    except KeyError as exc:
        raise CheckpointError(f"{source.name}: an OpenCLIP checkpoint without {exc}") from exc
    state.pop("attn_mask", None)
    notes = [f"heads assumed {HEAD_WIDTH} wide (OpenCLIP's): {vit.heads} in the image tower"]
    vocab = package_vocab_file() if text is not None else None
    if text is not None and vocab is None:
        notes.append(
            "no prompts: OpenCLIP's tokenizer ships with the open_clip_torch package "
            f"({FAMILIES_INSTALL})"
        )
    prep = Preprocessing.from_dict({
        "image_size": list(vit.image_size), "resize": "crop", "crop_pct": 1.0,
        "interpolation": "bicubic", "mean": MEAN, "std": STD, "channels": vit.in_channels,
    })  # fmt: skip
    config = ClipConfig(
        vit=vit,
        embed_dim=embed_dim,
        text=text,
        tokenizer=None if vocab is None else str(vocab),
    )
    return Conversion(
        family="openclip",
        config=config,
        state=out,
        class_names=[],
        preprocessing=prep,
        notes=notes,
        kind="clip",
    )


FAMILY = Family(
    "openclip",
    detect,
    convert,
    info=FamilyInfo(
        label="OpenCLIP (and OpenAI CLIP) image and text towers",
        names="open_clip ViT-B/32, ViT-B/16, ViT-L/14, ... state dicts",
        forms="state dict (.pth, .safetensors); QuickGELU stated in a sidecar",
        parts=(
            "attention",
            "pre-norm blocks",
            "GELU or QuickGELU MLP",
            "a LayerNorm before the blocks",
            "CLS token",
            "projection to the joint space",
            "cosine prompt head (logit_scale)",
            "Conv2d patch embedding",
        ),
    ),
)
