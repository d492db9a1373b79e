"""The CIFAR-10 python batches folder (``cifar-10-batches-py``), read without running its pickles.

Each batch is a pickled dict: ``b'data'`` (N, 3072) uint8 (1024 red, 1024 green, 1024 blue values,
row-major 32 × 32), ``b'labels'`` (N ints), and ``batches.meta`` holds ``b'label_names'``. A
restricted unpickler allows only the numpy globals needed to rebuild those arrays, so a hostile
file can't run code.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from vitviz.core.errors import VitvizError

TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
META = "batches.meta"
CIFAR_FILES = (*TRAIN_BATCHES, TEST_BATCH, META)
CIFAR_SIZE = 32


class CifarError(VitvizError):
    """A CIFAR-10 folder or batch that can't be used; the message says what is wrong."""


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as Python 3 protocol-2 pickles use it for bytes: latin-1 only."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r} is not allowed")
    return text.encode("latin1")


def _allowed_globals() -> dict[tuple[str, str], Any]:
    """The numpy callables an ndarray pickle needs, under their old and new module names."""
    reconstruct = np.empty(0).__reduce__()[0]  # numpy(._)core.multiarray._reconstruct
    scalar = np.float64(0).__reduce__()[0]  # numpy(._)core.multiarray.scalar
    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,  # bytes in pickles re-written by Python 3
    }
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(module, "_reconstruct")] = reconstruct
        allowed[(module, "scalar")] = scalar
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    _ALLOWED = _allowed_globals()

    def find_class(self, module: str, name: str) -> Any:
        found = self._ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(
                f"{module}.{name} is not allowed in a CIFAR-10 batch (only numpy arrays are)"
            )
        return found


def safe_unpickle(data: bytes) -> Any:
    """Unpickle ``data`` allowing only plain containers and numpy arrays (Python 2 str as bytes)."""
    return _RestrictedUnpickler(io.BytesIO(data), encoding="bytes").load()


def missing_cifar_files(folder: str | Path) -> list[str]:
    """Names of the CIFAR-10 files that ``folder`` lacks (all of them if it is not a folder)."""
    root = Path(folder).expanduser()
    return [name for name in CIFAR_FILES if not (root / name).is_file()]


def _read_dict(path: Path) -> dict[Any, Any]:
    try:
        obj = safe_unpickle(path.read_bytes())
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        OverflowError,
    ) as exc:
        raise CifarError(f"{path.name} is not a readable CIFAR-10 batch ({exc})") from exc
    except OSError as exc:
        raise CifarError(f"{path} could not be read ({exc.strerror or exc})") from exc
    if not isinstance(obj, dict):
        raise CifarError(f"{path.name} is not a CIFAR-10 batch: it holds a {type(obj).__name__}")
    return obj


def read_label_names(folder: Path) -> list[str]:
    meta = _read_dict(folder / META)
    names = meta.get(b"label_names", meta.get("label_names"))
    if not isinstance(names, list) or not names:
        raise CifarError(f"{META} has no label_names list")
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]


def read_batch(path: Path, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch file -> images (N, 3, 32, 32) uint8, labels (N,) int64."""
    batch = _read_dict(path)
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or data.shape[1] != 3 * CIFAR_SIZE * CIFAR_SIZE
    ):
        shape = getattr(data, "shape", None)
        raise CifarError(f"{path.name}: b'data' must be a uint8 array (N, 3072), got {shape}")
    try:
        label_array = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise CifarError(f"{path.name}: b'labels' is not a list of class numbers") from exc
    if label_array.shape[0] != data.shape[0]:
        raise CifarError(f"{path.name}: {data.shape[0]} images but {label_array.shape[0]} labels")
    if label_array.size and (label_array.min() < 0 or label_array.max() >= num_classes):
        raise CifarError(f"{path.name}: labels outside 0..{num_classes - 1}")
    return data.reshape(-1, 3, CIFAR_SIZE, CIFAR_SIZE), label_array


def read_cifar10(
    folder: str | Path,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The whole folder: train images/labels (data_batch_1..5), test images/labels, names.

    Images are (N, 3, 32, 32) uint8, labels (N,) int64. Raises CifarError.
    """
    root = Path(folder).expanduser()
    missing = missing_cifar_files(root)
    if missing:
        raise CifarError(f"{root} is not a CIFAR-10 batches folder: missing {', '.join(missing)}")
    names = read_label_names(root)
    parts = [read_batch(root / name, len(names)) for name in TRAIN_BATCHES]
    train_x = np.concatenate([p[0] for p in parts])
    train_y = np.concatenate([p[1] for p in parts])
    test_x, test_y = read_batch(root / TEST_BATCH, len(names))
    return train_x, train_y, test_x, test_y, names
