"""Safe reading of checkpoint files: safetensors, or torch.load(weights_only=True). Nothing runs."""

from __future__ import annotations

import argparse
import pickle
import pickletools
import re
import struct
import tarfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.training_args import plain
from vitviz.core.filekinds import CHECKPOINT_SUFFIXES

ACCEPTED = (
    "Accepted: vitviz .safetensors files; ViT state dicts (.pth/.pt/.bin/.safetensors) of "
    "torchvision, timm, DeiT, DINO/DINOv2, vit-pytorch and tutorial models; Hugging Face and timm "
    "folders (config.json + weights)."
)
_LFS_MAGIC = b"version https://git-lfs"
# Dicts that hold the weights in training checkpoints; DINO's "teacher" is what DINO evaluates.
_WRAPPER_KEYS = (
    "state_dict",
    "model_state_dict",
    "model",
    "module",
    "net",
    "network",
    "teacher",
    "student",
)
MIN_TORCH = (2, 6)
# What a stored tensor may hold: floats that convert exactly to float32 (float8 too), and the
# integers and booleans of index buffers and masks. Not complex, quantised, packed sub-byte or
# scale-only (float8_e8m0fnu) types.
_READABLE_DTYPES = frozenset(
    {
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float8_e4m3fn,
        torch.float8_e4m3fnuz,
        torch.float8_e5m2,
        torch.float8_e5m2fnuz,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint64,
        torch.uint32,
        torch.uint16,
        torch.uint8,
        torch.bool,
    }
)
_PREFIXES = ("module.", "_orig_mod.")
SAFE_CLASSES = [argparse.Namespace]


@dataclass
class RawCheckpoint:
    """Tensors of a checkpoint file, unwrapped, plus what else the file said."""

    state: dict[str, torch.Tensor]
    metadata: dict[str, str] = field(default_factory=dict)  # safetensors header metadata
    extra: dict[str, Any] = field(default_factory=dict)  # non-tensor entries of a .pth dict
    path: Path | None = None


def is_checkpoint_path(path: str | Path) -> bool:
    """Should the window treat ``path`` as a checkpoint? Files by suffix only; a folder when it
    holds config.json (a Hugging Face or timm model folder)."""
    p = Path(path)
    if p.suffix.lower() in CHECKPOINT_SUFFIXES:
        return True
    return p.is_dir() and (p / "config.json").is_file()


def read_checkpoint(path: str | Path) -> RawCheckpoint:
    """Read ``path`` safely; raise CheckpointError with a plain message on anything else."""
    p, obj, metadata = _read(path)
    raw = RawCheckpoint(state=obj, metadata=metadata) if metadata is not None else _unwrap(obj, p)
    raw.extra = {k: plain(v) for k, v in raw.extra.items()}  # timm's args Namespace: a dict
    raw.state = _strip_prefixes(checked_state(raw.state, p.name))
    raw.path = p
    return raw


def read_checkpoint_object(path: str | Path) -> Any:
    """What ``path`` holds, read as safely as ``read_checkpoint`` but not unwrapped: a .pth
    file's object as torch.load(weights_only=True) gives it (dicts, lists, tensors, numbers,
    strings; an optimizer's state is data, nothing in it runs), a .safetensors file's
    {name: tensor}."""
    return _read(path)[1]


def _read(path: str | Path) -> tuple[Path, Any, dict[str, str] | None]:
    """(path, object, safetensors metadata or None for a torch file), or CheckpointError."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{p.name}: no such file.")
    if p.is_dir():
        raise CheckpointError(f"{p.name} is a folder, not a checkpoint file. {ACCEPTED}")
    if not p.is_file():  # a FIFO would block the read forever; a device never ends
        raise CheckpointError(f"{p.name} is not a regular file (a pipe or a device). {ACCEPTED}")
    size = p.stat().st_size
    if size == 0:
        raise CheckpointError(f"{p.name} is empty (0 bytes). {ACCEPTED}")
    with open(p, "rb") as f:
        head = f.read(64)
    if head.startswith(_LFS_MAGIC):
        raise CheckpointError(
            f"{p.name} is a Git LFS pointer, not the weights: fetch the real file "
            "with `git lfs pull` and open that."
        )
    if p.suffix.lower() == ".safetensors" or _looks_like_safetensors(head, size):
        state, metadata = _read_safetensors(p)
        return p, state, metadata
    return p, _read_torch(p), None


def _looks_like_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 0 < n < size and head[8:9] == b"{"


def _read_safetensors(p: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    try:
        with safe_open(str(p), framework="pt", device="cpu") as f:
            metadata = dict(f.metadata() or {})
            state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no iter
    except BaseException as exc:
        if not _parse_failure(exc):
            raise
        raise CheckpointError(
            f"{p.name} is not a readable .safetensors file (it may be truncated "
            f"or damaged: {_short(exc)}). {ACCEPTED}"
        ) from exc
    return state, metadata


def _parse_failure(exc: BaseException) -> bool:
    """Whether a reader's exception says the file is damaged: any error but running out of
    memory, and a panic of the Rust safetensors reader (a BaseException)."""
    if isinstance(exc, Exception):
        return not isinstance(exc, MemoryError)
    return type(exc).__name__ == "PanicException"


def check_torch_version(version: str | None = None) -> None:
    """Refuse to unpickle with a torch whose weights_only loader has known escapes (< 2.6)."""
    text = version if version is not None else torch.__version__
    m = re.match(r"(\d+)\.(\d+)", str(text))
    if m is None or (int(m.group(1)), int(m.group(2))) < MIN_TORCH:
        raise CheckpointError(
            f"vitviz needs torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer to open .pth/.pt/.bin "
            f"files safely (older torch.load(weights_only=True) can be made to run code, "
            f"CVE-2025-32434); this is torch {text}. Update torch, or open a .safetensors file."
        )


def _read_torch(p: Path) -> Any:
    check_torch_version()
    is_zip, is_tar = _container(p)
    if is_tar:  # torch.load would unpack it into a temp folder
        raise CheckpointError(
            f"{p.name} is in PyTorch's oldest (tar) format, which vitviz does not read. "
            "Load it with that old PyTorch and save the state dict again: "
            "torch.save(model.state_dict(), 'weights.pth')."
        )
    try:
        # timm's train.py keeps its run's argparse.Namespace in the checkpoint (``args``): the
        # one class admitted beyond weights_only's own, for this load only; it holds data
        with warnings.catch_warnings(), torch.serialization.safe_globals(SAFE_CLASSES):
            warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4": we say it
            obj = torch.load(p, map_location="cpu", weights_only=True, mmap=is_zip)
    except Exception as exc:  # any failure to parse is the user's file, not a bug
        needs = re.search(r"GLOBAL ([\w.]+)", str(exc))
        if needs:
            raise _refused_pickle(p, needs.group(1)) from exc
        if not is_zip:
            global_name = _pickle_global(p)
            if global_name is not None:
                raise _refused_pickle(p, global_name) from exc
        # a KeyError's text is torch's bare lookup key (a text file: "101"), which says nothing
        said = None if isinstance(exc, (pickle.UnpicklingError, KeyError)) else exc
        raise _unreadable(p, said) from exc
    return obj


def _container(p: Path) -> tuple[bool, bool]:
    """(a zip archive, an old torch tar archive) by their records; a zip whose records can't be
    read (a damaged end of its central directory, e.g. one claiming a second disk) is refused."""
    try:
        if zipfile.is_zipfile(p):
            return True, False
        return False, tarfile.is_tarfile(p)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, ValueError, struct.error) as exc:
        raise _unreadable(p, exc) from exc


def _pickle_global(p: Path) -> str | None:
    """The first Python object a raw pickle would import, found by reading its opcodes only.

    Returns None when the file is not a pickle or refers to no object. Nothing is executed.
    """
    strings: list[str] = []
    try:
        with open(p, "rb") as f:
            for opcode, arg, _ in pickletools.genops(f):
                if opcode.name in ("GLOBAL", "INST") and isinstance(arg, str):
                    return arg.replace(" ", ".")
                if opcode.name == "STACK_GLOBAL":
                    return ".".join(strings[-2:]) if len(strings) >= 2 else "a Python object"
                if isinstance(arg, str):
                    strings.append(arg)
    except Exception:  # noqa: BLE001 - not a pickle at all
        return None
    return None


def _unreadable(p: Path, exc: BaseException | None = None) -> CheckpointError:
    why = f": {_short(exc)}" if exc is not None else ""
    return CheckpointError(
        f"{p.name} is not a PyTorch or safetensors checkpoint, or it is "
        f"truncated or damaged{why}. {ACCEPTED}"
    )


def _refused_pickle(p: Path, global_name: str) -> CheckpointError:
    return CheckpointError(
        f"{p.name} is a pickle that needs code to load (it holds {global_name}), such as a whole "
        "saved model or a training script's objects. vitviz loads weights only and never runs "
        "code from a file. Save a state dict instead: torch.save(model.state_dict(), "
        "'weights.pth')."
    )


def _unwrap(obj: Any, p: Path) -> RawCheckpoint:
    """Find the state dict inside common wrappers ({'model': sd}, {'state_dict': sd}, ...)."""
    extra: dict[str, Any] = {}
    for _ in range(3):
        if not isinstance(obj, dict):
            break
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return RawCheckpoint(state=obj, extra=extra)
        key = next((k for k in _WRAPPER_KEYS if isinstance(obj.get(k), dict)), None)
        inner = obj[key] if key is not None else None
        if key is not None:
            extra.setdefault("wrapped_in", []).append(key)
        extra.update({k: v for k, v in obj.items() if not isinstance(v, (dict, torch.Tensor))})
        extra.update(
            {
                k: v
                for k, v in obj.items()
                if isinstance(v, dict) and v is not inner and not _has_tensors(v)
            }
        )
        if inner is None:
            break
        obj = inner
    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if tensors:
            return RawCheckpoint(state=tensors, extra=extra)
    kind = type(obj).__name__
    raise CheckpointError(f"{p.name} holds a {kind} without model weights in it. {ACCEPTED}")


def checked_state(state: dict[Any, Any], name: str) -> dict[str, torch.Tensor]:
    """``state`` itself when it is a state dict every family may read: each key a non-empty
    name, each value a dense tensor with data, in a dtype vitviz can convert exactly; the one
    gate between a file and the family detectors. CheckpointError (one line naming ``name``)
    otherwise."""
    for key, value in state.items():
        if not isinstance(key, str) or not key:
            odd = (
                "(empty)"
                if isinstance(key, str)
                else f"({_short_repr(key)} of type {type(key).__name__})"
            )
            raise CheckpointError(
                f"{name}: its state dict has a key that is not a name {odd}; a state dict "
                f"maps parameter names to tensors. {ACCEPTED}"
            )
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{name}: {_short_repr(key)} holds a {type(value).__name__}, not a tensor. "
                f"{ACCEPTED}"
            )
        if value.is_quantized or value.dtype not in _READABLE_DTYPES:
            raise _not_floats(name, key, value.dtype)
        if value.layout != torch.strided or value.is_nested:
            raise CheckpointError(
                f"{name}: {key} is a {_layout_name(value)} tensor; vitviz reads plain dense "
                f"tensors only. {ACCEPTED}"
            )
        if value.is_meta:
            raise CheckpointError(
                f"{name}: {key} is a tensor without data (saved from the meta device). {ACCEPTED}"
            )
    return state


def _layout_name(tensor: torch.Tensor) -> str:
    return "nested" if tensor.is_nested else str(tensor.layout).removeprefix("torch.")


def _not_floats(name: str, key: str, dtype: torch.dtype) -> CheckpointError:
    return CheckpointError(
        f"{name}: {key} holds {_dtype_name(dtype)} numbers where vitviz needs "
        f"floating-point weights (a quantised checkpoint?). Accepted: float32, float16, "
        f"bfloat16 or float64 weights; save them with model.float().state_dict()."
    )


def to_float(state: dict[str, torch.Tensor], dtype: torch.dtype, name: str) -> list[str]:
    """Every floating-point tensor of ``state`` as ``dtype`` (in place: float16 and bfloat16
    weights become float32); notes saying what was converted.

    Raises CheckpointError for weights (``*.weight``, ``*.bias``) stored as integers, booleans
    or complex numbers: quantised checkpoints need their scales, which vitviz does not read.
    """
    converted: dict[str, int] = {}
    for key, tensor in state.items():
        if tensor.is_floating_point():
            if tensor.dtype != dtype:
                converted[_dtype_name(tensor.dtype)] = (
                    converted.get(_dtype_name(tensor.dtype), 0) + 1
                )
                state[key] = tensor.to(dtype)
        elif tensor.is_complex() or key.rsplit(".", 1)[-1] in ("weight", "bias"):
            raise _not_floats(name, key, tensor.dtype)
    return [
        f"{n} {kind} tensor{'s' if n > 1 else ''} loaded as {_dtype_name(dtype)}"
        for kind, n in sorted(converted.items())
    ]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _short_repr(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _has_tensors(d: dict) -> bool:
    return any(isinstance(v, torch.Tensor) for v in d.values())


def _strip_prefixes(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop wrapper prefixes ('module.', '_orig_mod.') shared by every key."""
    changed = True
    while changed and state:
        changed = False
        for prefix in _PREFIXES:
            if all(k.startswith(prefix) for k in state):
                state = {k[len(prefix) :]: v for k, v in state.items()}
                changed = True
    return state


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
