"""Hugging Face transformers MobileViT folders: ``MobileViTForImageClassification`` and
``MobileViTModel`` (config.json with ``model_type`` "mobilevit" + model.safetensors,
preprocessor_config.json).

Keys: ``[mobilevit.]conv_stem``, ``[mobilevit.]encoder.layer.{i}``: the MobileNetV2 layers'
``layer.{j}.{expand_1x1, conv_3x3, reduce_1x1}``, a MobileViT layer's ``downsampling_layer``,
``conv_kxk``, ``conv_1x1``, ``transformer.layer.{k}`` (``attention.attention.{query, key,
value}``, ``attention.output.dense``, ``layernorm_before``, ``layernorm_after``,
``intermediate.dense``, ``output.dense``), ``layernorm``, ``conv_projection``, ``fusion``;
``conv_1x1_exp``, ``classifier``. Every tensor is renamed to timm's place (q, k and v joined
into one qkv) and read as timm's MobileViT is: the two compute the same. Their image processor
flips the channels (RGB to BGR) by default: vitviz feeds RGB and flips the stem's input
channels instead (the same products), and the library check gives transformers' model the
flipped image.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import Taker, aligned_state, finish_kind, fuse_qkv
from vitviz.checkpoints.families.hf_library import build_transformers, read_transformers
from vitviz.checkpoints.families.reference import LibraryReference
from vitviz.checkpoints.labels import names_from_id2label
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import hf_preprocessing
from vitviz.kinds.mobilevit.config import MobileViTConfig
from vitviz.kinds.mobilevit.families import EXTRAS, _shape

LOOKS_LIKE = "a Hugging Face MobileViT"
_STEM = "conv_stem.convolution.weight"
_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
_IR = (("expand_1x1", "conv1_1x1"), ("conv_3x3", "conv2_kxk"), ("reduce_1x1", "conv3_1x1"))
_LAYER = re.compile(r"encoder\.layer\.(\d+)\.")
# the image processor's defaults (MobileViTImageProcessor): no normalisation, BGR
_PROCESSOR = {
    "do_resize": True,
    "size": {"shortest_edge": 224},
    "do_center_crop": True,
    "crop_size": {"height": 256, "width": 256},
    "resample": 3,
    "do_normalize": False,
    "do_flip_channel_order": True,
}


def hf_layers(model: nn.Module) -> list[nn.Module]:
    """transformers' MobileViT's self-attention modules in order."""
    base = getattr(model, "mobilevit", model)
    return [
        layer.attention.attention
        for stage in base.encoder.layer
        for layer in getattr(getattr(stage, "transformer", None), "layer", ())
    ]


def _hooks(model: nn.Module, out: list[Tensor]) -> list[Any]:
    """What enters each self-attention's dropout: its softmax(q·kᵀ / √d), (B·P, heads, N, N)."""
    return [
        m.dropout.register_forward_hook(lambda _m, _i, o: out.append(o)) for m in hf_layers(model)
    ]


def _reader(flip: bool) -> Any:
    def read(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor] | None]:
        return read_transformers(model, x.flip(1) if flip else x, hooks=_hooks)

    return read


# transformers' MobileViT is convolutional with unfolded patches: it runs at any input size as
# built (no position table), so a size analysed that is not the model's own is checked there
LIBRARY_MODEL = LibraryReference(build_transformers, _reader(False), any_size={})
LIBRARY_MODEL_BGR = LibraryReference(build_transformers, _reader(True), any_size={})


def _base(state: dict[str, Tensor]) -> str | None:
    key = next((k for k in state if k.endswith(_STEM)), None)
    return None if key is None else key[: -len(_STEM)]


def detect(source: Source) -> bool:
    cfg = source.hf_config
    if cfg is not None and cfg.get("model_type") != "mobilevit":
        return False
    base = _base(source.state)
    return base is not None and any(
        k.startswith(f"{base}encoder.layer.") and ".transformer.layer." in k for k in source.state
    )


def _conv(t: Taker, old: str, new: str, out: dict[str, Tensor], bn: bool = True) -> None:
    """``old``'s conv and BatchNorm tensors to ``new``'s (timm's ``conv``, ``bn``)."""
    out[f"{new}.conv.weight"] = t.take(f"{old}.convolution.weight")
    if bn:
        for part in _BN:
            tensor = t.maybe(f"{old}.normalization.{part}")
            if tensor is not None:
                out[f"{new}.bn.{part}"] = tensor
            elif part != "num_batches_tracked":
                t.take(f"{old}.normalization.{part}")  # refused: missing
            else:
                out[f"{new}.bn.{part}"] = torch.zeros((), dtype=torch.long)


def _linear(t: Taker, old: str, new: str, out: dict[str, Tensor]) -> None:
    out[f"{new}.weight"] = t.take(f"{old}.weight")
    out[f"{new}.bias"] = t.take(f"{old}.bias")


def _renamed(t: Taker, base: str) -> dict[str, Tensor]:
    """The state under timm's names."""
    out: dict[str, Tensor] = {}
    _conv(t, f"{base}conv_stem", "stem", out)
    stages = sorted({int(m.group(1)) for k in t.state if (m := _LAYER.match(k[len(base) :]))})
    for i in stages:
        old = f"{base}encoder.layer.{i}"
        j = 0
        while f"{old}.layer.{j}.expand_1x1.convolution.weight" in t:
            for theirs, ours in _IR:
                _conv(t, f"{old}.layer.{j}.{theirs}", f"stages.{i}.{j}.{ours}", out)
            j += 1
        if f"{old}.downsampling_layer.expand_1x1.convolution.weight" in t:
            for theirs, ours in _IR:
                _conv(t, f"{old}.downsampling_layer.{theirs}", f"stages.{i}.{j}.{ours}", out)
            j += 1
        if f"{old}.conv_kxk.convolution.weight" not in t:
            continue
        new = f"stages.{i}.{j}"
        _conv(t, f"{old}.conv_kxk", f"{new}.conv_kxk", out)
        out[f"{new}.conv_1x1.weight"] = t.take(f"{old}.conv_1x1.convolution.weight")
        k = 0
        while f"{old}.transformer.layer.{k}.layernorm_before.weight" in t:
            src, dst = f"{old}.transformer.layer.{k}", f"{new}.transformer.{k}"
            qkv = f"{src}.attention.attention"
            out[f"{dst}.attn.qkv.weight"] = fuse_qkv(
                *(t.take(f"{qkv}.{n}.weight") for n in ("query", "key", "value"))
            )
            biases = [t.maybe(f"{qkv}.{n}.bias") for n in ("query", "key", "value")]
            if all(b is not None for b in biases):
                out[f"{dst}.attn.qkv.bias"] = fuse_qkv(*biases)  # type: ignore[arg-type]
            elif any(b is not None for b in biases):
                raise CheckpointError(
                    f"{t.source.name} looks like {LOOKS_LIKE}, but {qkv} has biases on some "
                    "of q, k and v only."
                )
            _linear(t, f"{src}.attention.output.dense", f"{dst}.attn.proj", out)
            _linear(t, f"{src}.layernorm_before", f"{dst}.norm1", out)
            _linear(t, f"{src}.layernorm_after", f"{dst}.norm2", out)
            _linear(t, f"{src}.intermediate.dense", f"{dst}.mlp.fc1", out)
            _linear(t, f"{src}.output.dense", f"{dst}.mlp.fc2", out)
            k += 1
        _linear(t, f"{old}.layernorm", f"{new}.norm", out)
        _conv(t, f"{old}.conv_projection", f"{new}.conv_proj", out)
        _conv(t, f"{old}.fusion", f"{new}.conv_fusion", out)
    if f"{base}conv_1x1_exp.convolution.weight" not in t:
        raise CheckpointError(
            f"{t.source.name} looks like {LOOKS_LIKE} without its final 1×1 conv "
            "(expand_output=False), which vitviz's MobileViT does not model."
        )
    _conv(t, f"{base}conv_1x1_exp", "final_conv", out)
    if "classifier.weight" in t:
        _linear(t, "classifier", "head.fc", out)
    t.refuse_leftovers()
    return out


def _settings(source: Source, cfg: dict[str, Any], stages: int) -> dict[str, Any]:
    """What config.json says beside the weights; CheckpointError for what vitviz's MobileViT
    does not compute (another activation, dilated stages)."""
    if cfg.get("hidden_act", "silu") not in ("silu", "swish"):
        raise CheckpointError(
            f"{source.name}: vitviz's MobileViT computes with SiLU, not {cfg['hidden_act']!r}."
        )
    stride = _whole(source, cfg, "output_stride", 32)
    if stride != 32:
        raise CheckpointError(
            f"{source.name}: output_stride {stride} dilates the last stages, "
            "which vitviz's MobileViT does not model."
        )
    if _whole(source, cfg, "conv_kernel_size", 3) != 3:
        raise CheckpointError(f"{source.name}: vitviz's MobileViT has 3×3 local and fusion convs.")
    ph, pw = _hw(source, cfg, "patch_size", 2)
    if ph != pw:
        raise CheckpointError(f"{source.name}: vitviz's MobileViT has square patches")
    eps = cfg.get("layer_norm_eps", 1e-5)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise _bad(source, "layer_norm_eps", eps, "a small positive number")
    return {
        "patch_size": ph,
        "norm_eps": float(eps),
        "heads": _whole(source, cfg, "num_attention_heads", 4),
        "strides": (1,) + (2,) * (stages - 1),
    }


def _bad(source: Source, key: str, value: Any, wanted: str) -> CheckpointError:
    return CheckpointError(f"{source.name}: config.json's {key} is {value!r}, not {wanted}.")


def _whole(source: Source, cfg: dict[str, Any], key: str, default: int) -> int:
    """config.json's ``key`` (``default`` where absent): a positive whole number, else refused
    in one line naming the field."""
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _bad(source, key, value, "a positive whole number")
    return value


def _hw(source: Source, cfg: dict[str, Any], key: str, default: int) -> tuple[int, int]:
    """config.json's ``key`` as (h, w): one positive whole number or a list of one or two."""
    value = cfg.get(key, default)
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    ok = 1 <= len(items) <= 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in items
    )
    if not ok:
        raise _bad(source, key, value, "a positive whole number or a list of one or two")
    return int(items[0]), int(items[-1])


def _library_reads(source: Source, cfg: dict[str, Any]) -> None:
    """Refuse a config.json transformers' MobileViT can't be built from (a field of the wrong
    type, widths of the wrong count): vitviz could not show the library's numbers for it."""
    for key, count in (("hidden_sizes", 3), ("neck_hidden_sizes", 7)):
        value = cfg.get(key)
        ok = (
            isinstance(value, list)
            and len(value) == count
            and all(
                isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 16 for v in value
            )
        )
        if value is not None and not ok:
            raise _bad(source, key, value, f"a list of {count} positive whole numbers")
    arch = cfg.get("architectures")
    if arch is not None and not (isinstance(arch, list) and all(isinstance(a, str) for a in arch)):
        raise _bad(source, "architectures", arch, "a list of class names")
    if _whole(source, cfg, "num_channels", 3) != 3:
        raise CheckpointError(f"{source.name}: vitviz's MobileViT takes RGB images (3 channels).")
    try:
        from transformers import MobileViTConfig as LibraryConfig
    except ImportError:
        return  # the library check says it is not installed
    try:
        LibraryConfig.from_dict(cfg)
    except Exception as exc:
        text = " ".join(str(exc).split())
        raise CheckpointError(
            f"{source.name}: transformers can't read its config.json ({type(exc).__name__}: "
            f"{text[:160]})."
        ) from exc


def convert(source: Source) -> Conversion:
    cfg: dict[str, Any] = dict(source.hf_config or {})
    if not cfg:
        raise CheckpointError(
            f"{source.name} looks like {LOOKS_LIKE}, but its config.json is not beside it; open "
            "the folder transformers saved."
        )
    t = Taker(source, LOOKS_LIKE)
    state = _renamed(t, _base(t.state) or "")
    renamed = dataclasses.replace(source, state=state, folder_config=None)
    shape = _shape(renamed)
    settings = _settings(source, cfg, len(shape["dims"]))
    heads = settings.pop("heads")
    settings["heads"] = tuple(heads if d else 0 for d in shape["depths"])
    proc = dict(source.preprocessor or _PROCESSOR)
    notes: list[str] = []
    if source.preprocessor is None:
        notes.append(f"{source.preprocessor_found}: MobileViTImageProcessor's defaults")
    flip = bool(proc.get("do_flip_channel_order", True))
    if flip:
        state["stem.conv.weight"] = state["stem.conv.weight"].flip(1)
        notes.append(
            "its image processor feeds BGR: vitviz feeds RGB to the stem with its input "
            "channels reversed (the same products)"
        )
    proc.setdefault("do_normalize", False)
    size = _hw(source, cfg, "image_size", 256)
    prep, prep_notes = hf_preprocessing(proc, size)
    inferred = {**shape, **settings, "image_size": tuple(prep.pop("image_size", size))}
    _library_reads(source, cfg)  # after vitviz's own field checks, which name the field
    conversion = finish_kind(
        renamed,
        kind="mobilevit",
        config_cls=MobileViTConfig,
        words=("a MobileViT", "its config fields", "MobileViT"),
        extras=EXTRAS,
        family="huggingface-mobilevit",
        inferred=inferred,
        state=aligned_state(state),
        class_names=names_from_id2label(cfg.get("id2label"), shape["num_classes"]),
        preprocessing=prep,
        notes=notes + prep_notes,
        imagenet_if_1000=True,
    )
    arch = (cfg.get("architectures") or [""])[0]
    conversion.reference = Reference(
        "transformers", str(arch), {"model_type": "mobilevit"},
        how=LIBRARY_MODEL_BGR if flip else LIBRARY_MODEL,
    )  # fmt: skip
    return conversion


FAMILY = Family(
    "huggingface-mobilevit",
    detect,
    convert,
    info=FamilyInfo(
        label="Hugging Face transformers MobileViT",
        names="MobileViTForImageClassification, MobileViTModel",
        forms="save_pretrained folder",
        parts=(
            "3×3 conv stem, MobileNetV2 inverted residual blocks (BatchNorm, SiLU)",
            "MobileViT layers: local convs, unfold into p×p patches, transformer layers over "
            "each pixel offset's patches, fold, fusion conv",
            "1×1 conv, average pool, classifier (BGR input: the stem's channels reversed)",
        ),
    ),
)
