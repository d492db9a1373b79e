"""timm's model for the library check (DESIGN §4): built from the architecture's name on the meta
device and given the file's own tensors (no init, no network), read with hooks on its attention
dropout (its explicit path). The ViT's timm families use ``LIBRARY_MODEL``; a kind's timm family
makes its own with ``timm_reference``, naming its blocks and how their probabilities are read."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from vitviz.checkpoints.families.reference import LibraryReference, Resize
from vitviz.checkpoints.reading import read_checkpoint, to_float

# (a block, the list its probabilities go to) -> the hook's handle, or None: no attention
Probabilities = Callable[[nn.Module, list[Tensor]], Any]  # a hook handle (its ``remove``) or None


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


# (the file's tensors, timm's model built on the meta device) -> the tensors in that model's
# layout, as timm's own loading converts them (its checkpoint_filter_fn)
Prepare = Callable[[dict[str, Tensor], nn.Module], dict[str, Tensor]]


def build_timm(
    arch: str,
    model_args: Mapping[str, Any],
    cfg: Any,
    weights: Path,
    prepare: Prepare | None = None,
) -> nn.Module:
    """timm's ``arch`` with ``model_args`` holding the file's tensors (strict: every tensor
    taken, none missing), through ``prepare`` when given; classes, image size and channels from
    vitviz's ``cfg``."""
    import timm

    # aligned storage, as timm's model has after a normal load (assign=True would keep views
    # into the file's buffer, maybe unaligned: a conv's fp32 rounding follows the alignment)
    state = {k: v if v.data_ptr() % 64 == 0 else v.clone() for k, v in file_state(weights).items()}
    args = dict(model_args)
    args.setdefault("num_classes", cfg.num_classes)
    args.setdefault("img_size", tuple(cfg.image_size))
    if cfg.in_channels != 3:
        args.setdefault("in_chans", cfg.in_channels)
    try:
        with torch.device("meta"):
            model = timm.create_model(arch, pretrained=False, **args)
    except TypeError:  # an architecture of any input size takes no img_size
        if "img_size" in model_args:
            raise
        del args["img_size"]
        with torch.device("meta"):
            model = timm.create_model(arch, pretrained=False, **args)
    if prepare is not None:
        state = prepare(dict(state), model)
    model.load_state_dict(dict(state), strict=True, assign=True)
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):  # computed buffers
        model = timm.create_model(arch, pretrained=False, **args)
        model.load_state_dict(dict(state), strict=True)
    return model.eval()


def own_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's ``blocks`` in order."""
    return list(getattr(model, "blocks", None) or [])


def no_blocks(model: nn.Module) -> list[nn.Module]:
    """No block compared: a model whose attention maps are not the library's layout."""
    return []


class _Handles:
    """Several hooks removed as one (a block of several branches)."""

    def __init__(self, handles: list[RemovableHandle]) -> None:
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _branches_after_dropout(block: nn.Module, out: list[Tensor]) -> _Handles:
    """A block of several attention branches (timm's ParallelThingsBlock): each branch's
    probabilities, appended as one (B, P·H, N, N) once the block has run, branch 0's heads
    first."""
    kept: list[Tensor] = []
    handles = [h for branch in block.attns if (h := after_dropout(branch, kept)) is not None]

    def joined(_module: nn.Module, _args: tuple, _output: Tensor) -> None:
        out.append(torch.cat(kept, dim=1))
        kept.clear()

    return _Handles([*handles, block.register_forward_hook(joined)])


def after_dropout(block: nn.Module, out: list[Tensor]) -> RemovableHandle | _Handles | None:
    """Switch ``block.attn`` (or a parallel block, which attends itself) to its explicit path
    and append what enters its ``attn_drop``: softmax(q·kᵀ), (B, heads, N, N); a block of
    several attention branches: every branch's heads side by side."""
    if isinstance(getattr(block, "attns", None), nn.ModuleList):
        return _branches_after_dropout(block, out)
    a = getattr(block, "attn", None)
    if a is None and hasattr(block, "in_proj"):
        a = block
    if a is None or not hasattr(a, "attn_drop"):
        return None
    a.fused_attn = False
    return a.attn_drop.register_forward_hook(lambda _m, _i, o: out.append(o))


def read_timm(
    model: nn.Module,
    x: Tensor,
    blocks: Callable[[nn.Module], list[nn.Module]] = own_blocks,
    probabilities: Probabilities = after_dropout,
) -> tuple[Tensor, list[Tensor] | None]:
    """timm's logits (B, classes) and each of ``blocks(model)``'s attention probabilities as
    ``probabilities`` hooks them (None: no block has one)."""
    attn: list[Tensor] = []
    handles = [h for b in blocks(model) if (h := probabilities(b, attn)) is not None]
    try:
        with torch.no_grad():
            logits = model(x)
    finally:
        for h in handles:
            h.remove()
    return logits, attn or None


def set_to_size(model: nn.Module, size: tuple[int, int]) -> nn.Module:
    """timm's ``model`` (a copy: it is changed) set to take (H, W) ``size`` inputs by timm's own
    ``set_input_size``: the position table and each relative position bias made for the new
    grid as timm makes them (a BEiT's or a relpos ViT's bias table resampled by its
    ``resize_rel_pos_bias_table``, a relpos MLP evaluated at the new offsets). TypeError for a
    model without it."""
    resize = getattr(model, "set_input_size", None)
    if resize is None:
        raise TypeError(f"{type(model).__name__} has no set_input_size")
    with warnings.catch_warnings():  # timm's interpolation warns of torch's slow paths
        warnings.simplefilter("ignore")
        resize(img_size=tuple(size))
    return model


def timm_reference(
    blocks: Callable[[nn.Module], list[nn.Module]] = own_blocks,
    probabilities: Probabilities = after_dropout,
    prepare: Prepare | None = None,
    at_size: Resize | None = None,
) -> LibraryReference:
    """timm's model read over ``blocks`` with ``probabilities``'s hooks (the file's tensors
    through ``prepare`` first, when given); ``at_size``: how a model without
    ``dynamic_img_size`` is set to another size (``LibraryReference.at_size``)."""
    build = build_timm if prepare is None else partial(build_timm, prepare=prepare)
    return LibraryReference(
        build,
        partial(read_timm, blocks=blocks, probabilities=probabilities),
        any_size={"dynamic_img_size": True},  # its position table resampled by timm's own rule
        at_size=at_size,
    )


# the ViT's: ``blocks``, serial or parallel; a timm class without ``dynamic_img_size`` (BEiT,
# the relpos ViTs) set to each other size analysed by its ``set_input_size``
LIBRARY_MODEL = timm_reference(at_size=set_to_size)
