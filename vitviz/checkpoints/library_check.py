"""The library's own model checks vitviz's reading of a checkpoint, once per file.

When a converter knows which library architecture a checkpoint is (a timm folder's
``architecture``, ``--arch``, or a bare state dict recognised by its tensors) and that library
is importable, its model is built from the name alone (on the meta device, then given the
file's own tensors: no init, no network, no remote code; the tensors come from vitviz's safe
reading, safetensors or ``weights_only``) and both models run one seeded probe image:

    logits     max |ours - theirs| / max |theirs|        must be <= 1e-4
    attention  max |ours - theirs| over every layer      must be <= 1e-5

A difference refuses the checkpoint with both numbers. The result is kept in vitviz's cache
folder under a key of the file (size, mtime, a hash of its first and last MiB), the settings
and the library's and vitviz's versions, so the second open costs nothing.
``VITVIZ_NO_LIBRARY_CHECK=1`` skips the check (a note says so).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vitviz import __version__ as vitviz_version
from vitviz.checkpoints.atomic import atomic_path
from vitviz.checkpoints.cache import cache_home
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.folders import folder_weights
from vitviz.checkpoints.reading import read_checkpoint, to_float
from vitviz.kindapi import kind_of

LOGITS_RTOL = 1e-4
ATTENTION_ATOL = 1e-5
SKIP_ENV = "VITVIZ_NO_LIBRARY_CHECK"
_MIB = 1 << 20


@dataclass(frozen=True)
class Reference:
    """The library architecture a conversion claims to be."""

    library: str  # "timm"
    arch: str
    model_args: dict[str, Any]
    settings: str = ""  # the settings built beside the name's, in words: "6 heads, mean pooling"
    shown_as: str = ""  # what the note calls it when not ``arch`` ("VisionTransformer")

    @property
    def label(self) -> str:
        """ "timm's vit_tiny_patch16_224 with 6 heads, mean pooling"."""
        whose = self.library + ("'" if self.library.endswith("s") else "'s")
        what = self.shown_as or self.arch
        named = f"{whose} {what}" if what else f"{self.library}'s model"
        return named + (f" with {self.settings}" if self.settings else "")


@dataclass(frozen=True)
class CheckResult:
    """``logits``: max relative error; ``attention``: max absolute error (None: not compared)."""

    library: str  # e.g. "timm 1.0.31"
    arch: str  # the architecture checked, with the settings built beside its name's
    logits: float | None
    attention: float | None
    problem: str | None = None  # why it could not be compared

    @property
    def ok(self) -> bool:
        if self.logits is None:
            return self.problem is not None
        return self.logits <= LOGITS_RTOL and (
            self.attention is None or self.attention <= ATTENTION_ATOL
        )

    def note(self) -> str:
        if self.problem is not None:
            return f"not checked against {self.library}: {self.problem}"
        att = "" if self.attention is None else f", attention {self.attention:.1g}"
        return (
            f"checked against {self.library}: vitviz's reading of {self.arch}: logits "
            f"{self.logits:.1g}{att}"
        )


def cache_dir() -> Path:
    """vitviz's own cache folder: ``VITVIZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/vitviz``."""
    given = os.environ.get("VITVIZ_CACHE_DIR")
    return Path(given) if given else cache_home() / "vitviz"


def weights_file(path: Path) -> Path:
    return folder_weights(path) if path.is_dir() else path


def file_key(path: Path) -> str:
    """Size, mtime and a hash of the first and last MiB of ``path``."""
    st = path.stat()
    h = hashlib.sha1(f"{st.st_size}:{st.st_mtime_ns}".encode())
    with open(path, "rb") as f:
        h.update(f.read(_MIB))
        if st.st_size > 2 * _MIB:
            f.seek(-_MIB, os.SEEK_END)
            h.update(f.read(_MIB))
    return h.hexdigest()


def library_version(library: str) -> str | None:
    """ "timm 1.0.31" for an installed library (from its metadata: nothing is imported)."""
    try:
        return f"{library} {metadata.version(library)}"
    except metadata.PackageNotFoundError:
        return None


def checked(
    model: nn.Module, path: Path, ref: Reference, force: bool = False
) -> CheckResult | None:
    """The check of ``model`` (vitviz's, from ``path``) against ``ref``, from the cache when it
    was made before; None when the library is not importable or the check is switched off."""
    version = library_version(ref.library)
    if version is None or (os.environ.get(SKIP_ENV) == "1" and not force):
        return None
    weights = weights_file(path)
    mine = f"vitviz {vitviz_version}"
    config = json.dumps(
        [model.config.to_dict(), asdict(ref), version, mine], sort_keys=True, default=str
    )
    key = hashlib.sha1((file_key(weights) + config).encode()).hexdigest()
    where = cache_dir() / "library_checks" / f"{key}.json"
    if not force:
        try:
            return CheckResult(**json.loads(where.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            pass
    result = compare(model, weights, ref, version)
    try:
        with atomic_path(where) as tmp:
            tmp.write_text(json.dumps(asdict(result)), encoding="utf-8")
    except OSError:
        pass  # a cache that can't be written only costs the next open another check
    return result


def check_or_refuse(model: nn.Module, path: Path, ref: Reference | None, notes: list[str]) -> None:
    """Note the check's result, or refuse the checkpoint when the numbers differ."""
    if ref is None:
        return
    if os.environ.get(SKIP_ENV) == "1":
        notes.append(f"not checked against {ref.library} ({SKIP_ENV}=1)")
        return
    result = checked(model, path, ref)
    if result is None:
        return
    if not result.ok:
        att = "" if result.attention is None else f", attention {result.attention:.2g}"
        raise CheckpointError(
            f"{path.name}: vitviz's reading of {ref.label} differs from {result.library}'s own "
            f"model: logits {result.logits:.2g} (limit {LOGITS_RTOL:g}){att} (limit "
            f"{ATTENTION_ATOL:g}); refused rather than shown wrong."
        )
    notes.append(result.note())


def compare(model: nn.Module, weights: Path, ref: Reference, version: str) -> CheckResult:
    """Build the library's model, load the file's tensors, run both on one probe image."""
    cfg = model.config
    build, forward = BUILDERS[ref.library]
    try:
        theirs = build(ref, cfg, weights)
    except (
        ImportError,
        RuntimeError,
        ValueError,
        TypeError,
        KeyError,
        OSError,
        CheckpointError,
    ) as exc:
        problem = f"its model does not take these tensors ({type(exc).__name__})"
        return CheckResult(version, ref.label, None, None, problem)
    g = torch.Generator().manual_seed(0)
    h, w = cfg.image_size
    x = torch.randn(1, cfg.in_channels, h, w, generator=g)
    ref_logits, ref_attn = forward(theirs, x)
    with torch.no_grad():  # its kind says which of its outputs the library's are comparable with
        mine, attentions = kind_of(model).library_outputs(model, x)
    logits = _relative(mine, ref_logits)
    attention = None
    if ref_attn and attentions is not None:
        same = len(ref_attn) == len(attentions)
        attention = (
            max(_max_abs(a, b) for a, b in zip(attentions, ref_attn, strict=True))
            if same
            else float("inf")
        )
    return CheckResult(version, ref.label, logits, attention)


def file_state(weights: Path) -> dict[str, Tensor]:
    """The file's tensors as float32, under timm's names (a shared wrapper prefix removed)."""
    state = read_checkpoint(weights).state
    to_float(state, torch.float32, weights.name)
    for _ in range(2):
        if "patch_embed.proj.weight" in state:
            break
        heads = {k.split(".", 1)[0] for k in state}
        if len(heads) != 1:
            break
        cut = len(heads.pop()) + 1
        state = {k[cut:]: v for k, v in state.items()}
    return state


def build_timm(ref: Reference, cfg: Any, weights: Path) -> nn.Module:
    """timm's model of ``ref`` holding the file's tensors (strict: every tensor taken, none
    missing)."""
    import timm

    # aligned storage, as timm's model has after a normal load (assign=True would keep views
    # into the file's buffer, maybe unaligned: a conv's fp32 rounding follows the alignment)
    state = {k: v if v.data_ptr() % 64 == 0 else v.clone() for k, v in file_state(weights).items()}
    args = dict(ref.model_args)
    args.setdefault("num_classes", cfg.num_classes)
    args.setdefault("img_size", tuple(cfg.image_size))
    if cfg.in_channels != 3:
        args.setdefault("in_chans", cfg.in_channels)
    try:
        with torch.device("meta"):
            model = timm.create_model(ref.arch, pretrained=False, **args)
    except TypeError:  # an architecture of any input size (a PVT v2) takes no img_size
        if "img_size" in ref.model_args:
            raise
        del args["img_size"]
        with torch.device("meta"):
            model = timm.create_model(ref.arch, pretrained=False, **args)
    model.load_state_dict(dict(state), strict=True, assign=True)
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):  # computed buffers
        model = timm.create_model(ref.arch, pretrained=False, **args)
        model.load_state_dict(dict(state), strict=True)
    return model.eval()


def _timm_blocks(model: nn.Module) -> list[nn.Module]:
    """A timm model's attention blocks in order: ``blocks`` (one list per stage: Twins), or
    those of its ``stages`` (PVT v2)."""
    blocks = getattr(model, "blocks", None)
    if blocks is not None:
        return [b for x in blocks for b in (x if isinstance(x, nn.ModuleList) else [x])]
    return [b for stage in getattr(model, "stages", []) for b in getattr(stage, "blocks", [])]


def timm_forward(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """timm's logits and each block's attention probabilities (its explicit path); the
    class-attention blocks of a CaiT (``blocks_token_only``) or an XCiT (``cls_attn_blocks``)
    follow its other blocks."""
    attn: list[Tensor] = []
    handles = []
    blocks = _timm_blocks(model)
    for name in ("blocks_token_only", "cls_attn_blocks"):
        blocks += getattr(model, name, None) or []
    for block in blocks:
        a = getattr(block, "attn", None)
        if a is None and hasattr(block, "in_proj"):  # a parallel block attends itself
            a = block
        if a is not None and hasattr(a, "use_mask_unit_attn"):  # Hiera: no dropout module
            a.fused_attn = False
            handles.append(a.qkv.register_forward_hook(_mask_unit_probabilities(a, attn)))
            continue
        if a is None or not hasattr(a, "attn_drop"):
            continue
        a.fused_attn = False
        handles.append(a.attn_drop.register_forward_hook(lambda _m, _i, o: attn.append(o)))
    try:
        with torch.no_grad():
            logits = model(x)
    finally:
        for h in handles:
            h.remove()
    return logits, attn


def _mask_unit_probabilities(a: nn.Module, out: list[Tensor]) -> Any:
    """A forward hook on a timm Hiera attention's ``qkv`` Linear appending its probabilities
    softmax((q·scale)·kᵀ) as timm's eager path forms them from that output, in timm's layout:
    (B, heads, units, t_q, t_k) within mask units, else (B, heads, N_q, N_k), unrolled order."""

    def hook(_m: nn.Module, inputs: tuple[Tensor, ...], qkv: Tensor) -> None:
        B, N, _ = inputs[0].shape
        h, d, stride = a.heads, a.head_dim, a.q_stride
        if a.use_mask_unit_attn:
            units = N // (stride * a.window_size)
            q, k, _v = qkv.reshape(B, -1, units, 3, h, d).permute(3, 0, 4, 2, 1, 5).unbind(0)
            if stride > 1:
                q = q.view(B, h, units, stride, -1, d).amax(dim=3)
        else:
            q, k, _v = qkv.reshape(B, N, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
            if stride > 1:
                q = q.view(B, h, stride, -1, d).amax(dim=2)
        out.append(((q * a.scale) @ k.transpose(-1, -2)).softmax(dim=-1))

    return hook


def build_transformers(ref: Reference, cfg: Any, weights: Path) -> nn.Module:
    """transformers' own class of the folder (config.json's ``architectures``), loaded by
    transformers from the folder's safetensors: local files only, no remote code. It is built as
    the file has it: a base model saved without its pooler (a ViTModel as DINO and MAE backbones
    and fine-tuning code save it) is built without one; any other part of the library's model
    that the file lacks would be a fresh random one: ValueError, no comparison (the note says
    the file was not checked, and why)."""
    import transformers

    if weights.suffix != ".safetensors":
        raise ValueError("only safetensors folders are loaded by the library for the check")
    cls = getattr(transformers, ref.arch, None) if ref.arch else transformers.AutoModel
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        cls = transformers.AutoModel
    overrides = {k: v for k, v in ref.model_args.items() if k != "model_type"}  # config fields
    model, missing = _from_folder(cls, weights.parent, overrides)
    no_pooler = {"add_pooling_layer": False}
    if missing and all(".pooler." in f".{k}" for k in missing) and _takes(cls, no_pooler):
        model, missing = _from_folder(cls, weights.parent, {**overrides, **no_pooler})
    if missing:
        raise ValueError(f"its model has parts the file lacks: {', '.join(missing[:3])}")
    return model.eval()


def _takes(cls: type, kwargs: dict[str, Any]) -> bool:
    """Whether ``cls``'s constructor takes every keyword of ``kwargs``."""
    import inspect

    return set(kwargs) <= set(inspect.signature(cls.__init__).parameters)


def _from_folder(cls: Any, folder: Path, kwargs: dict[str, Any]) -> tuple[nn.Module, list[str]]:
    """``cls.from_pretrained(folder)`` with its eager attention, and the names of its tensors
    the folder lacked; transformers' progress bar and load report (its missing-weight warnings)
    kept off the user's terminal."""
    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        model, info = cls.from_pretrained(
            folder,
            local_files_only=True,
            trust_remote_code=False,
            use_safetensors=True,
            attn_implementation="eager",
            output_loading_info=True,
            **kwargs,
        )
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    return model, sorted(info.get("missing_keys") or ())


ORDERED_NOISE = ("vit_mae",)  # model types whose forward shuffles the patches by random noise


def transformers_forward(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """transformers' logits (a base model: its pooler output, else the normed CLS token, or the
    mean token of a model with no CLS token, I-JEPA's) and attention probabilities. A ViT-MAE
    gets ascending masking noise: no patch shuffled (with mask_ratio 0, none dropped)."""
    extra = {}
    if getattr(model.config, "model_type", None) in ORDERED_NOISE:
        p = int(model.config.patch_size)
        n = (x.shape[-2] // p) * (x.shape[-1] // p)
        extra["noise"] = torch.arange(n, dtype=x.dtype).expand(x.shape[0], n)
    per_layer: list[Tensor] = []  # a Hiera's: each layer's (the outputs keep a stage's last)
    handles = [
        m.register_forward_hook(_hiera_probabilities(m, per_layer))
        for m in model.modules()
        if hasattr(m, "use_mask_unit_attn")
    ]
    try:
        with torch.no_grad():
            out = model(pixel_values=x, output_attentions=True, **extra)
    finally:
        for h in handles:
            h.remove()
    logits = getattr(out, "logits", None)
    if logits is None:
        pooled = getattr(out, "pooler_output", None)
        embeddings = getattr(getattr(model, "base_model", model), "embeddings", None)
        has_cls = getattr(embeddings, "cls_token", None) is not None
        hidden = out.last_hidden_state
        if hidden.ndim == 4:  # a (B, C, H, W) map (PVT v2): the mean over its positions
            hidden = hidden.flatten(2).transpose(1, 2)
        logits = pooled if pooled is not None else hidden[:, 0] if has_cls else hidden.mean(1)
    attentions = []
    for a in getattr(out, "attentions", None) or []:  # a pyramid's: one tuple per stage
        attentions.extend(a if isinstance(a, (tuple, list)) else [a])
    return logits, per_layer or attentions


def _hiera_probabilities(a: nn.Module, out: list[Tensor]) -> Any:
    """A forward hook on a transformers Hiera attention appending the probabilities it returns,
    in timm's layout: (B, heads, units, t_q, t_k) within mask units, else (B, heads, N_q, N_k)
    (its one "unit" of global attention dropped)."""

    def hook(_m: nn.Module, _inputs: tuple[Tensor, ...], output: tuple[Tensor, Any]) -> None:
        probs = output[1]
        if probs is not None:
            out.append(probs if a.use_mask_unit_attn else probs.squeeze(2))

    return hook


BUILDERS = {
    "timm": (build_timm, timm_forward),
    "transformers": (build_transformers, transformers_forward),
}


def _max_abs(a: Tensor, b: Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).abs().max())


def _relative(ours: Tensor, theirs: Tensor) -> float:
    scale = float(theirs.double().abs().max())
    return _max_abs(ours, theirs) / max(scale, 1e-12)
