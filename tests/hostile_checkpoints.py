"""Hostile checkpoint generators (see hostile_files.py for ``Case`` and how rounds work).

Bases: a tiny torchvision ViT (zoo_helpers.tiny_torchvision_vit: 32 px, patch 8, width 32,
1 layer, 2 heads, 2 classes; its sidecar says ``{"heads": 2}``) and vitviz's own format
(conftest.random_vit + vitviz.checkpoints.save_checkpoint).

Pickles that would run code do it through ``os.system``, ``exec``, ``eval``, ``subprocess.Popen``
or ``open(..., "w")``, and all they would do is create a marker file (``PWNED-*``) in the
case's folder: if anything ever ran one, the harness sees the file (and the audit hook sees the
call). torch is imported when a case is written, not when cases are listed.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import pickle
import random
import struct
import subprocess
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from hostile_files import Case, Expect
from hostile_images import bitflip

Writer = Callable[[Path], Path]
State = dict[str, Any]  # name -> torch.Tensor (typed loosely: torch is imported late)

TV_SIDECAR = {"heads": 2}
HEAD = "heads.head"
LAYER = "encoder.layers.encoder_layer_0."


# --------------------------------------------------------------------------- bases


@cache
def _tv_state() -> State:
    from zoo_helpers import randomize_, tiny_torchvision_vit

    model = randomize_(tiny_torchvision_vit(num_classes=2), seed=0)
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def tv_state() -> State:
    """A fresh copy of the tiny torchvision ViT's state dict (float32)."""
    return {k: v.clone() for k, v in _tv_state().items()}


@cache
def _native() -> tuple[dict[str, str], State]:
    """Metadata and tensors of a native checkpoint of conftest.random_vit(0)."""
    from conftest import CLASS_NAMES, random_vit
    from safetensors import safe_open

    from vitviz.checkpoints import save_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        path = save_checkpoint(random_vit(0), Path(tmp) / "n.safetensors", CLASS_NAMES)
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata()), {k: f.get_tensor(k).clone() for k in f.keys()}  # noqa: SIM118


def native_parts() -> tuple[dict[str, str], State]:
    meta, state = _native()
    return dict(meta), {k: v.clone() for k, v in state.items()}


def save_state(path: Path, state: Any, **torch_kw: Any) -> Path:
    """``state`` as .safetensors (save_file) or anything else (torch.save)."""
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(state, str(path), metadata=torch_kw.get("metadata"))
    else:
        import torch

        torch.save(state, path, **torch_kw)
    return path


def tv_writer(
    make: Callable[[], Any],
    suffix: str = ".pth",
    sidecar: str | dict | None = None,
    **torch_kw: Any,
) -> Writer:
    """Writes ``make()`` (a state dict or any object) as ``tv<suffix>``, with a sidecar (JSON
    text or a dict; default ``{"heads": 2}``)."""

    def write(folder: Path) -> Path:
        path = save_state(folder / f"tv{suffix}", make(), **torch_kw)
        side = TV_SIDECAR if sidecar is None else sidecar
        text = side if isinstance(side, str) else json.dumps(side)
        (folder / f"tv{suffix}.vitviz.json").write_text(text)
        return path

    return write


def native_writer(
    change_state: Callable[[State], State] | None = None,
    change_meta: Callable[[dict[str, str]], dict[str, str]] | None = None,
) -> Writer:
    def write(folder: Path) -> Path:
        from safetensors.torch import save_file

        meta, state = native_parts()
        state = change_state(state) if change_state else state
        meta = change_meta(meta) if change_meta else meta
        path = folder / "native.safetensors"
        save_file(state, str(path), metadata=meta)
        return path

    return write


def _ckpt(name: str, write: Writer, expect: Expect, **kw: Any) -> Case:
    return Case(name, "checkpoint", write, expect, **kw)


def _bytes_writer(name: str, make: Callable[[Path], bytes], sidecar: bool = True) -> Writer:
    """Writes ``make(folder)`` as ``folder/name`` (plus the tv sidecar)."""

    def write(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(make(folder))
        if sidecar:
            (folder / f"{name}.vitviz.json").write_text(json.dumps(TV_SIDECAR))
        return path

    return write


@cache
def file_bytes(kind: str) -> bytes:
    """Bytes of a valid base checkpoint: tv-safetensors, tv-zip, tv-legacy, native."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if kind == "tv-safetensors":
            path = save_state(folder / "x.safetensors", tv_state())
        elif kind == "tv-zip":
            path = save_state(folder / "x.pth", tv_state())
        elif kind == "tv-legacy":
            path = save_state(folder / "x.pth", tv_state(), _use_new_zipfile_serialization=False)
        else:
            path = native_writer()(folder)
        return path.read_bytes()


BASE_FILES = {
    "tv-safetensors": ".safetensors",
    "tv-zip": ".pth",
    "tv-legacy": ".pth",
    "native": ".safetensors",
}


# --------------------------------------------------------------------------- controls and dtypes


def controls(rng: random.Random, first: bool) -> list[Case]:
    """Valid checkpoints in every container: must be accepted."""
    if not first:
        return []

    def wrapped(key: str) -> Callable[[], Any]:
        return lambda: {key: tv_state(), "epoch": 3, "note": "trained"}

    cases = [
        _ckpt("ckpt-control/tv.pth", tv_writer(tv_state), "accepted"),
        _ckpt("ckpt-control/tv.safetensors", tv_writer(tv_state, ".safetensors"), "accepted"),
        _ckpt("ckpt-control/native", native_writer(), "accepted"),
        _ckpt("ckpt-control/wrapped-state_dict", tv_writer(wrapped("state_dict")), "accepted"),
        _ckpt("ckpt-control/wrapped-model", tv_writer(wrapped("model")), "accepted", ci=False),
        _ckpt(
            "ckpt-control/module-prefix",
            tv_writer(lambda: {f"module.{k}": v for k, v in tv_state().items()}),
            "accepted",
        ),
        _ckpt(
            "ckpt-control/legacy-format",
            tv_writer(tv_state, _use_new_zipfile_serialization=False),
            "accepted",
        ),
        _ckpt("ckpt-control/suffix-.bin", tv_writer(tv_state, ".bin"), "accepted", ci=False),
        _ckpt("ckpt-control/suffix-.ckpt", tv_writer(tv_state, ".ckpt"), "accepted", ci=False),
    ]
    for protocol in (2, 3, 4, 5):
        # torch's weights_only unpickler reads protocols 2 and 3 only: 4 and 5 may be refused.
        cases.append(
            _ckpt(
                f"ckpt-control/pickle-protocol-{protocol}",
                tv_writer(tv_state, pickle_protocol=protocol),
                "accepted" if protocol <= 3 else "either",
                ci=protocol in (3, 5),
            )
        )
    return cases


def _cast(dtype_name: str, keys: str = "all") -> Callable[[State], State]:
    """Every float tensor (``keys="all"``) or only the head's weight cast to ``dtype_name``."""

    def change(state: State) -> State:
        import torch

        dtype = getattr(torch, dtype_name)
        return {
            k: v.to(dtype) if keys == "all" or k.endswith(keys) else v for k, v in state.items()
        }

    return change


def dtypes(rng: random.Random, first: bool) -> list[Case]:
    """Half, bfloat16 and float64 weights load (as float32); integer, bool, complex weights where
    a float is expected are refused."""
    if not first:
        return []
    cases = []
    for dtype in ("float16", "bfloat16", "float64"):
        for suffix in (".pth", ".safetensors"):
            cases.append(
                _ckpt(
                    f"dtype/tv-{dtype}{suffix}",
                    tv_writer(lambda d=dtype: _cast(d)(tv_state()), suffix),
                    "accepted",
                    ci=dtype != "float64" or suffix == ".pth",
                )
            )
        cases.append(
            _ckpt(
                f"dtype/native-{dtype}",
                native_writer(_cast(dtype)),
                "accepted",
                ci=dtype == "bfloat16",
            )
        )
    cases.append(
        _ckpt(
            "dtype/tv-mixed-one-float16",
            tv_writer(lambda: _cast("float16", "in_proj_weight")(tv_state())),
            "accepted",
        )
    )
    for dtype, expect in (
        ("int8", "refused"),
        ("uint8", "refused"),
        ("int64", "refused"),
        ("bool", "refused"),
        ("complex64", "refused"),
        ("float8_e4m3fn", "either"),
    ):
        for suffix in (".pth", ".safetensors"):
            if dtype == "complex64" and suffix == ".safetensors":
                continue  # safetensors has no complex dtype
            cases.append(
                _ckpt(
                    f"dtype/tv-{dtype}-head{suffix}",
                    tv_writer(lambda d=dtype: _cast(d, f"{HEAD}.weight")(tv_state()), suffix),
                    expect,
                    ci=dtype in ("int8", "bool", "float8_e4m3fn") and suffix == ".pth",
                )
            )
    for name in ODD_TENSORS:  # listed without torch; made when written
        cases.append(
            _ckpt(
                f"dtype/tv-{name}-head.pth",
                tv_writer(lambda n=name: head_weight_as(n)),
                "refused",
                ci=False,
            )
        )
    return cases


def odd_tensors() -> dict[str, Callable[[Any], Any]]:
    """Tensors a state dict can hold that no family can use: name -> makes one from a weight."""
    import torch

    return {
        "qint8": lambda w: torch.quantize_per_tensor(w, 0.01, 0, torch.qint8),
        "sparse-coo": lambda w: w.to_sparse(),
        "sparse-csr": lambda w: w.to_sparse_csr(),
        "meta": lambda w: w.to("meta"),
        "float8_e8m0fnu": lambda w: w.abs().to(torch.float8_e8m0fnu),
        "uint16": lambda w: w.to(torch.uint16),
    }


ODD_TENSORS = ("qint8", "sparse-coo", "sparse-csr", "meta", "float8_e8m0fnu", "uint16")


def head_weight_as(kind: str) -> State:
    """The tv state with its head weight made into one of ``ODD_TENSORS`` (the deprecated or
    beta ones, quantised and sparse CSR, warn when made: quiet here, they still save and load)."""
    import warnings

    state = tv_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state[f"{HEAD}.weight"] = odd_tensors()[kind](state[f"{HEAD}.weight"])
    return state


# --------------------------------------------------------------------------- code-running pickles


class RunsCode:
    """Unpickling this calls ``how`` so that it creates ``marker`` (and nothing else)."""

    def __init__(self, how: str, marker: Path) -> None:
        self.how = how
        self.marker = str(marker)

    def __reduce__(self) -> tuple:
        code = f"open({self.marker!r}, 'w').close()"
        if self.how == "os-system":
            return (os.system, (f"touch '{self.marker}'",))
        if self.how == "exec":
            return (builtins.exec, (code,))
        if self.how == "eval":
            return (builtins.eval, (code,))
        if self.how == "subprocess":
            return (subprocess.Popen, (["touch", self.marker],))
        if self.how == "open-write":
            return (builtins.open, (self.marker, "w"))
        raise ValueError(self.how)


PAYLOADS = ("os-system", "exec", "eval", "subprocess", "open-write")
CONTAINERS = (
    "raw-pickle",
    "raw-pickle-dict",
    "torch-zip",
    "torch-zip-wrapper",
    "torch-zip-nested",
    "torch-legacy",
    "legacy-tar",
)
SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")


def _tar(payload_pickle: bytes, protocol: int) -> bytes:
    """torch's oldest (tar) format: members sys_info, pickle, storages, tensors."""
    sys_info = pickle.dumps(
        {"protocol_version": 1001, "little_endian": True, "type_sizes": {}}, protocol=protocol
    )
    members = {
        "sys_info": sys_info,
        "pickle": payload_pickle,
        "storages": pickle.dumps(0, protocol=protocol),
        "tensors": pickle.dumps(0, protocol=protocol),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def pickle_writer(how: str, protocol: int, container: str, suffix: str) -> Writer:
    def write(folder: Path) -> Path:
        evil = RunsCode(how, folder / f"PWNED-{how}")
        path = folder / f"evil{suffix}"
        if container == "raw-pickle":
            path.write_bytes(pickle.dumps(evil, protocol=protocol))
        elif container == "raw-pickle-dict":
            obj = {"state_dict": {"w": [0.5, 0.25]}, "epoch": 1, "hook": evil}
            path.write_bytes(pickle.dumps(obj, protocol=protocol))
        elif container == "legacy-tar":
            path.write_bytes(_tar(pickle.dumps(evil, protocol=protocol), protocol))
        else:
            state = tv_state()
            obj: Any = {
                "torch-zip": {**state, "zz_hook": evil},
                "torch-zip-wrapper": {"state_dict": state, "args": evil, "epoch": 7},
                "torch-zip-nested": {"model": state, "optimizer": {"param_groups": [{"x": evil}]}},
                "torch-legacy": {**state, "zz_hook": evil},
            }[container]
            legacy = {"_use_new_zipfile_serialization": False} if "legacy" in container else {}
            save_state(path, obj, pickle_protocol=protocol, **legacy)
        (folder / f"evil{suffix}.vitviz.json").write_text(json.dumps(TV_SIDECAR))
        return path

    return write


def code_pickles(rng: random.Random, first: bool) -> list[Case]:
    """Every payload × pickle protocol 0-5 × container: refused, and nothing runs. The CI subset
    has each (protocol, container) pair once, the payloads taking turns."""
    if not first:
        return []
    cases = []
    for ci, container in enumerate(CONTAINERS):
        for protocol in range(6):
            for pi, how in enumerate(PAYLOADS):
                suffix = SUFFIXES[(protocol + pi) % len(SUFFIXES)]
                cases.append(
                    _ckpt(
                        f"pickle/{how}-p{protocol}-{container}{suffix}",
                        pickle_writer(how, protocol, container, suffix),
                        "refused",
                        ci=pi == (protocol + ci) % len(PAYLOADS) and (protocol + ci) % 2 == 0,
                    )
                )
    cases.append(
        _ckpt(
            "pickle/os-system-named-safetensors",
            pickle_writer("os-system", 4, "raw-pickle", ".safetensors"),
            "refused",
        )
    )
    cases.append(
        _ckpt(
            "pickle/numpy-array-in-state",
            tv_writer(lambda: {**tv_state(), "extra": __import__("numpy").zeros(3)}),
            "either",
        )
    )
    return cases


# --------------------------------------------------------------------------- damaged files


def truncated_checkpoints(rng: random.Random, first: bool) -> list[Case]:
    """Each base file cut at seeded points: refused."""
    cases = []
    kinds = list(BASE_FILES) if first else rng.sample(list(BASE_FILES), 2)
    for kind in kinds:
        suffix = BASE_FILES[kind]

        def length(kind: str = kind) -> int:
            return len(file_bytes(kind))

        for where in ("head", "any"):
            # The cut is a fraction of the (not yet built) file, so listing cases needs no torch.
            fraction = rng.random() * (0.02 if where == "head" else 1.0)

            def make(folder: Path, kind: str = kind, fraction: float = fraction) -> bytes:
                data = file_bytes(kind)
                return data[: max(1, min(len(data) - 1, int(fraction * length(kind))))]

            cases.append(
                _ckpt(
                    f"ckpt-truncated/{kind}-{where}-{fraction:.6f}",
                    _bytes_writer("cut" + suffix, make),
                    "refused",
                    ci=first and where == "any",
                )
            )
    return cases


def bitflipped_checkpoints(rng: random.Random, first: bool) -> list[Case]:
    """Bits flipped in the header or anywhere: either way, but cleanly (and no NaN result)."""
    cases = []
    kinds = list(BASE_FILES) if first else rng.sample(list(BASE_FILES), 2)
    for kind in kinds:
        suffix = BASE_FILES[kind]
        for where, window in (("head", 256), ("any", None)):
            seed = rng.randrange(1 << 30)
            flips = rng.randint(1, 8)

            def make(folder: Path, kind=kind, seed=seed, flips=flips, window=window) -> bytes:
                return bitflip(file_bytes(kind), random.Random(seed), flips, window)

            cases.append(
                _ckpt(
                    f"ckpt-bitflip/{kind}-{where}-{flips}x-{seed}",
                    _bytes_writer("flipped" + suffix, make),
                    "either",
                    ci=first and (where == "head") == (kind.startswith("tv")),
                )
            )
    return cases


def _split_safetensors(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _join_safetensors(header: Any, body: bytes, length: int | None = None) -> bytes:
    if isinstance(header, bytes):
        text = header
    else:
        text = (header if isinstance(header, str) else json.dumps(header)).encode()
    text += b" " * (-len(text) % 8)
    n = len(text) if length is None else length
    return struct.pack("<Q", n) + text + body


def _lie(change: Callable[[dict, bytes], bytes]) -> Callable[[Path], bytes]:
    def make(folder: Path) -> bytes:
        header, body = _split_safetensors(file_bytes("tv-safetensors"))
        return change(header, body)

    return make


def _first_tensor(header: dict) -> str:
    return next(k for k in header if k != "__metadata__")


def _with(header: dict, key: str, field: str, value: Any) -> dict:
    header = json.loads(json.dumps(header))
    header[key][field] = value
    return header


def lying_safetensors(rng: random.Random, first: bool) -> list[Case]:
    """safetensors headers that lie about their length, offsets, shapes or dtypes: refused."""
    if not first:
        return []
    j = _join_safetensors
    deep = "[" * 100_000 + "]" * 100_000
    lies: dict[str, tuple[Callable[[dict, bytes], bytes], Expect]] = {
        "length-past-end": (lambda h, b: j(h, b, len(json.dumps(h)) + len(b) + 4096), "refused"),
        "length-zero": (lambda h, b: j(h, b, 0), "refused"),
        "length-2^64-1": (lambda h, b: j(h, b, 2**64 - 1), "refused"),
        "length-200MB": (lambda h, b: j(h, b, 200_000_000), "refused"),
        "length-short": (lambda h, b: j(h, b, len(json.dumps(h)) - 9), "refused"),
        "length-into-data": (lambda h, b: j(h, b, len(json.dumps(h)) + 24 + 8), "refused"),
        "offsets-past-end": (
            lambda h, b: j(_with(h, _first_tensor(h), "data_offsets", [0, len(b) + 64]), b),
            "refused",
        ),
        "offsets-reversed": (
            lambda h, b: j(_with(h, _first_tensor(h), "data_offsets", [8, 0]), b),
            "refused",
        ),
        "shape-lies": (
            lambda h, b: j(_with(h, _first_tensor(h), "shape", [1, 2, 32]), b),
            "refused",
        ),
        "shape-huge": (
            lambda h, b: j(_with(h, _first_tensor(h), "shape", [2**40, 2**40]), b),
            "refused",
        ),
        "shape-negative": (
            lambda h, b: j(_with(h, _first_tensor(h), "shape", [-1, 32]), b),
            "refused",
        ),
        "dtype-unknown": (lambda h, b: j(_with(h, _first_tensor(h), "dtype", "Q8"), b), "refused"),
        "header-a-list": (lambda h, b: j("[1, 2, 3]", b), "refused"),
        "header-deeply-nested": (lambda h, b: j('{"__metadata__": ' + deep + "}", b), "refused"),
        "metadata-not-strings": (
            lambda h, b: j({**h, "__metadata__": {"format": 1, "config": {"a": [1]}}}, b),
            "refused",
        ),
        "empty-header": (lambda h, b: j({}, b""), "refused"),
        "not-utf8-header": (lambda h, b: j(b'{"\xff\xfe": 1}', b), "refused"),
        "claims-vitviz-format": (
            lambda h, b: j({**h, "__metadata__": {"format": "vitviz"}}, b),
            "refused",
        ),
        "claims-vitviz-format-v1-no-config": (
            lambda h, b: j({**h, "__metadata__": {"format": "vitviz", "format_version": "1"}}, b),
            "refused",
        ),
    }
    in_ci = {
        "length-past-end",
        "length-2^64-1",
        "length-short",
        "offsets-past-end",
        "shape-huge",
        "dtype-unknown",
        "header-deeply-nested",
        "metadata-not-strings",
        "claims-vitviz-format-v1-no-config",
    }
    return [
        _ckpt(
            f"safetensors-lies/{key}",
            _bytes_writer("lies.safetensors", _lie(change)),
            expect,
            ci=key in in_ci,
        )
        for key, (change, expect) in lies.items()
    ]


def _rezip(change: Callable[[zipfile.ZipFile, zipfile.ZipFile], None]) -> Callable[[Path], bytes]:
    """The tv zip checkpoint rewritten entry by entry by ``change(src, dst)``."""

    def make(folder: Path) -> bytes:
        out = io.BytesIO()
        with (
            zipfile.ZipFile(io.BytesIO(file_bytes("tv-zip"))) as src,
            zipfile.ZipFile(out, "w") as dst,
        ):
            change(src, dst)
        return out.getvalue()

    return make


def _copy_except(drop: str, compress: int = zipfile.ZIP_STORED):
    def change(src: zipfile.ZipFile, dst: zipfile.ZipFile) -> None:
        for info in src.infolist():
            if not info.filename.endswith(drop):
                dst.writestr(info.filename, src.read(info), compress_type=compress)

    return change


def _zip_extra(name: str, data: bytes, compress: int = zipfile.ZIP_STORED):
    def change(src: zipfile.ZipFile, dst: zipfile.ZipFile) -> None:
        _copy_except("\0")(src, dst)
        dst.writestr(name, data, compress_type=compress)

    return change


def _zip_bomb_storage(src: zipfile.ZipFile, dst: zipfile.ZipFile) -> None:
    """Storage 0 replaced by 256 MB of deflated zeros (about 250 kB in the file)."""
    for info in src.infolist():
        if info.filename.endswith("/data/0"):
            dst.writestr(info.filename, bytes(256 << 20), compress_type=zipfile.ZIP_DEFLATED)
        else:
            dst.writestr(info.filename, src.read(info))


ZIP64_LOCATOR = b"PK\x06\x07"  # then: disk number (uint32), record offset (uint64), disks (uint32)


def spanning_disks(data: bytes, field: str = "disk") -> bytes:
    """A zip (``data``, which has a zip64 end-of-central-directory locator, as torch's have)
    whose locator says the archive spans disks: its disk number (``field="disk"``) 1, or its
    disk count (``"disks"``) 2. Python's zipfile raises BadZipFile('zipfiles that span multiple
    disks are not supported') on it, even in zipfile.is_zipfile (Python 3.11)."""
    out = bytearray(data)
    at = out.rfind(ZIP64_LOCATOR)
    if at < 0:
        raise ValueError("no zip64 end-of-central-directory locator in this zip")
    where, value = (at + 4, 1) if field == "disk" else (at + 16, 2)
    out[where : where + 4] = struct.pack("<L", value)
    return bytes(out)


def _tv_zip() -> bytes:
    return file_bytes("tv-zip")


def damaged_zips(rng: random.Random, first: bool) -> list[Case]:
    """torch zip checkpoints with missing, extra, compressed or enormous entries, or records
    that claim more than one disk."""
    if not first:
        return []
    spanning = [
        _ckpt(
            f"zip-damage/spans-disks-{field}",
            _bytes_writer("damaged.pth", lambda _, f=field: spanning_disks(_tv_zip(), f)),
            "refused",
            ci=field == "disk",
        )
        for field in ("disk", "disks")
    ]
    zips = {
        "missing-data.pkl": (_copy_except("data.pkl"), "refused"),
        "missing-storage": (_copy_except("/data/0"), "refused"),
        "deflated-entries": (_copy_except("\0", zipfile.ZIP_DEFLATED), "either"),
        "zip-slip-entry": (_zip_extra("../../PWNED-zip-slip", b"x"), "either"),
        "data.pkl-is-text": (
            lambda s, d: (_copy_except("data.pkl")(s, d), d.writestr("tv/data.pkl", b"hello")),
            "refused",
        ),
        "storage-bomb-256MB": (_zip_bomb_storage, "either"),
        "not-torch": (lambda s, d: d.writestr("readme.txt", b"just a zip"), "refused"),
    }
    in_ci = {"missing-data.pkl", "zip-slip-entry", "storage-bomb-256MB", "not-torch"}
    return spanning + [
        _ckpt(
            f"zip-damage/{key}",
            _bytes_writer("damaged.pth", _rezip(change)),
            expect,
            ci=key in in_ci,
        )
        for key, (change, expect) in zips.items()
    ]


# --------------------------------------------------------------------------- wrong contents


def _reshape(key: str, make: Callable[[Any], Any]) -> Callable[[], State]:
    def build() -> State:
        state = tv_state()
        state[key] = make(state[key])
        return state

    return build


def wrong_shapes(rng: random.Random, first: bool) -> list[Case]:
    """Tensors of the wrong shape, missing, extra, or views of a 1-element storage claiming
    10¹² elements: refused (or, where the shapes still make a model, accepted), cleanly."""
    import_torch = lambda: __import__("torch")  # noqa: E731 - torch only when written
    cases = []
    if first:
        shaped: dict[str, tuple[str, Callable[[Any], Any], Expect]] = {
            "qkv-transposed": (
                f"{LAYER}self_attention.in_proj_weight",
                lambda t: t.T.clone(),
                "refused",
            ),
            "head-weight-extra-row": (f"{HEAD}.weight", lambda t: t.new_zeros(3, 32), "refused"),
            "ln-weight-short": (f"{LAYER}ln_1.weight", lambda t: t[:31].clone(), "refused"),
            "pos-embedding-wrong-width": (
                "encoder.pos_embedding",
                lambda t: t[..., :31].clone(),
                "refused",
            ),
            "scalar-weight": (f"{LAYER}mlp.0.weight", lambda t: t.new_tensor(1.0), "refused"),
            "extra-leading-dim": (
                f"{LAYER}self_attention.out_proj.weight",
                lambda t: t[None].clone(),
                "refused",
            ),
            "empty-bias": ("conv_proj.bias", lambda t: t[:0].clone(), "refused"),
            "pos-embedding-5-tokens": (
                "encoder.pos_embedding",
                lambda t: t[:, :5].clone(),
                "either",
            ),
            "pos-embedding-2-tokens": (
                "encoder.pos_embedding",
                lambda t: t[:, :2].clone(),
                "either",
            ),
            "conv-kernel-4": ("conv_proj.weight", lambda t: t[:, :, :4, :4].clone(), "either"),
            "conv-one-channel": ("conv_proj.weight", lambda t: t[:, :1].clone(), "either"),
            "stride-0-head": (f"{HEAD}.weight", lambda t: t.new_ones(1).expand(2, 32), "accepted"),
        }
        in_ci = {"qkv-transposed", "head-weight-extra-row", "scalar-weight", "conv-kernel-4"}
        for key, (name, make, expect) in shaped.items():
            cases.append(
                _ckpt(f"shape/{key}", tv_writer(_reshape(name, make)), expect, ci=key in in_ci)
            )

        def giant(state: State) -> State:
            torch = import_torch()
            return {**state, "extra.giant": torch.zeros(1).expand(10**6, 10**6)}

        def missing(state: State) -> State:
            return {k: v for k, v in state.items() if not k.endswith("ln_2.bias")}

        cases += [
            _ckpt("shape/stride-0-giant-extra", tv_writer(lambda: giant(tv_state())), "either"),
            _ckpt("shape/missing-key", tv_writer(lambda: missing(tv_state())), "refused", ci=False),
            _ckpt(
                "shape/extra-key",
                tv_writer(lambda: {**tv_state(), "junk.weight": import_torch().zeros(3)}),
                "either",
            ),
            _ckpt("shape/empty-state", tv_writer(dict), "refused", ci=False),
            _ckpt(
                "shape/no-tensors",
                tv_writer(lambda: {"epoch": 3, "lr": 0.1, "names": ["a"]}),
                "refused",
            ),
        ]
    key = rng.choice(sorted(_tv_keys()))
    how = rng.choice(["grow", "shrink", "unsqueeze", "flatten"])

    def perturb(t: Any, how: str = how) -> Any:
        if how == "grow":
            return import_torch().cat([t, t[:1]], 0) if t.ndim else t[None]
        if how == "shrink":
            return t[:-1].clone() if t.ndim and t.shape[0] > 1 else t.reshape(-1)[:0].clone()
        if how == "unsqueeze":
            return t[None].clone()
        return t.reshape(-1).clone()

    cases.append(_ckpt(f"shape/{key}-{how}", tv_writer(_reshape(key, perturb)), "either", ci=first))
    return cases


def _tv_keys() -> list[str]:
    """The tiny torchvision ViT's tensor names (listed without torch)."""
    layer = [
        f"{LAYER}{n}"
        for n in (
            "ln_1.weight",
            "ln_1.bias",
            "self_attention.in_proj_weight",
            "self_attention.in_proj_bias",
            "self_attention.out_proj.weight",
            "self_attention.out_proj.bias",
            "ln_2.weight",
            "ln_2.bias",
            "mlp.0.weight",
            "mlp.0.bias",
            "mlp.3.weight",
            "mlp.3.bias",
        )
    ]
    return [
        "class_token",
        "conv_proj.weight",
        "conv_proj.bias",
        "encoder.pos_embedding",
        *layer,
        "encoder.ln.weight",
        "encoder.ln.bias",
        f"{HEAD}.weight",
        f"{HEAD}.bias",
    ]


def _poison(key: str, value: float, where: str = "first") -> Callable[[State], State]:
    def change(state: State) -> State:
        t = state[key].clone()
        flat = t.view(-1)
        if where == "all":
            flat.fill_(value)
        else:
            flat[0 if where == "first" else int(where)] = value
        return {**state, key: t}

    return change


def non_finite(rng: random.Random, first: bool) -> list[Case]:
    """NaN / ±Inf / overflowing weights: the analysis must be refused (never a 'nan%' result)."""
    nan, inf = float("nan"), float("inf")
    cases = []
    if first:
        fixed = {
            "nan-head-bias": (f"{HEAD}.bias", nan, "first"),
            "inf-head-weight": (f"{HEAD}.weight", inf, "first"),
            "minus-inf-class-token": ("class_token", -inf, "first"),
            "nan-pos-embedding": ("encoder.pos_embedding", nan, "all"),
            "overflow-ln-weight": (f"{LAYER}ln_1.weight", 3e38, "all"),
            "nan-conv": ("conv_proj.weight", nan, "all"),
        }
        for name, (key, value, where) in fixed.items():
            for suffix in (".pth", ".safetensors"):
                cases.append(
                    _ckpt(
                        f"non-finite/{name}{suffix}",
                        tv_writer(
                            lambda k=key, v=value, w=where: _poison(k, v, w)(tv_state()), suffix
                        ),
                        "refused",
                        ci=(suffix == ".pth") == (name != "nan-head-bias")
                        and name not in ("nan-conv", "minus-inf-class-token"),
                    )
                )
        cases.append(
            _ckpt(
                "non-finite/native-nan-head",
                native_writer(_poison("head.bias", nan)),
                "refused",
            )
        )
        cases.append(
            _ckpt(
                "non-finite/float16-overflow",
                tv_writer(lambda: _cast("float16")(_poison(f"{HEAD}.weight", 1e6)(tv_state()))),
                "refused",
            )
        )
    key = rng.choice(_tv_keys())
    value = rng.choice([nan, inf, -inf, 1e38, -1e38])
    spot = str(rng.randrange(16))

    def poisoned() -> State:
        state = tv_state()
        return _poison(key, value, str(int(spot) % state[key].numel()))(state)

    cases.append(
        _ckpt(f"non-finite/{key}-{value}-at-{spot}", tv_writer(poisoned), "either", ci=first)
    )
    return cases


def non_string_keys(rng: random.Random, first: bool) -> list[Case]:
    """State dicts with int, tuple, None or bytes keys."""
    if not first:
        return []
    cases = []
    odd = {"int": 0, "tuple": ("a", 1), "none": None, "bytes": b"key", "float": 1.5}
    for name, key in odd.items():
        cases.append(
            _ckpt(
                f"keys/{name}-key-among-weights",
                tv_writer(lambda k=key: {**tv_state(), k: tv_state()["class_token"]}),
                "either",
                ci=name in ("int", "tuple", "none"),
            )
        )
    cases.append(
        _ckpt(
            "keys/all-int-keys",
            tv_writer(lambda: dict(enumerate(tv_state().values()))),
            "refused",
        )
    )
    cases.append(
        _ckpt(
            "keys/int-keys-in-wrapper",
            tv_writer(lambda: {"state_dict": {**tv_state(), 7: tv_state()[f"{HEAD}.bias"]}}),
            "either",
        )
    )
    cases.append(
        _ckpt(
            "keys/none-key-in-wrapper",
            tv_writer(lambda: {"model": {None: tv_state()["class_token"], **tv_state()}}),
            "refused",
            ci=False,
        )
    )
    cases.append(
        _ckpt(
            "keys/empty-string-key",
            tv_writer(lambda: {**tv_state(), "": tv_state()[f"{HEAD}.bias"]}),
            "either",
        )
    )
    return cases


# --------------------------------------------------------------------------- settings


DEEP_JSON = "[" * 100_000 + "]" * 100_000

# (name, sidecar JSON text, expect): each merged into {"heads": 2} unless it replaces it.
SIDECARS: list[tuple[str, str, Expect]] = [
    ("image_size-32.5", '{"heads": 2, "image_size": 32.5}', "refused"),
    ("image_size--1", '{"heads": 2, "image_size": -1}', "refused"),
    ("image_size-0", '{"heads": 2, "image_size": 0}', "refused"),
    ("image_size-8192", '{"heads": 2, "image_size": 8192}', "refused"),
    ("image_size-1e9", '{"heads": 2, "image_size": 1e9}', "refused"),
    ("image_size-1000000000", '{"heads": 2, "image_size": 1000000000}', "refused"),
    ("image_size-abc", '{"heads": 2, "image_size": "abc"}', "refused"),
    ("image_size-[0,0]", '{"heads": 2, "image_size": [0, 0]}', "refused"),
    ("image_size-[32,32,32]", '{"heads": 2, "image_size": [32, 32, 32]}', "refused"),
    ("image_size-[32]", '{"heads": 2, "image_size": [32]}', "either"),
    ("image_size-true", '{"heads": 2, "image_size": true}', "refused"),
    ("image_size-null", '{"heads": 2, "image_size": null}', "either"),
    ("image_size-60", '{"heads": 2, "image_size": 60}', "either"),
    ("image_size-1024", '{"heads": 2, "image_size": 1024}', "either"),
    ("image_size-[-32,32]", '{"heads": 2, "image_size": [-32, 32]}', "refused"),
    ("heads-0", '{"heads": 0}', "refused"),
    ("heads--2", '{"heads": -2}', "refused"),
    ("heads-3-dim-32", '{"heads": 3}', "refused"),
    ("heads-1e9", '{"heads": 1000000000}', "refused"),
    ("heads-2.5", '{"heads": 2.5}', "refused"),
    ("heads-two", '{"heads": "two"}', "refused"),
    ("heads-32", '{"heads": 32}', "either"),
    ("patch_size-0", '{"heads": 2, "patch_size": 0}', "refused"),
    ("patch_size-7", '{"heads": 2, "patch_size": 7}', "either"),
    ("depth-1e9", '{"heads": 2, "depth": 1000000000}', "refused"),
    ("dim--1", '{"heads": 2, "dim": -1}', "refused"),
    ("norm_eps-x", '{"heads": 2, "norm_eps": "x"}', "refused"),
    ("mean-1e308", '{"heads": 2, "preprocessing": {"mean": [1e308, 1e308, 1e308]}}', "refused"),
    ("mean-one-1e308", '{"heads": 2, "preprocessing": {"mean": [1e308]}}', "refused"),
    ("mean-NaN", '{"heads": 2, "preprocessing": {"mean": [NaN, 0.5, 0.5]}}', "refused"),
    ("mean-Infinity", '{"heads": 2, "preprocessing": {"mean": Infinity}}', "refused"),
    ("mean-strings", '{"heads": 2, "preprocessing": {"mean": ["a", "b", "c"]}}', "refused"),
    ("mean-two-numbers", '{"heads": 2, "preprocessing": {"mean": [0.5, 0.5]}}', "refused"),
    ("mean-empty", '{"heads": 2, "preprocessing": {"mean": []}}', "refused"),
    ("mean-one-number", '{"heads": 2, "preprocessing": {"mean": [0.5], "std": [0.5]}}', "accepted"),
    ("mean-bare-number", '{"heads": 2, "preprocessing": {"mean": 0.5}}', "either"),
    ("std-0", '{"heads": 2, "preprocessing": {"std": [0, 0, 0]}}', "refused"),
    ("std-bare-0", '{"heads": 2, "preprocessing": {"std": 0}}', "refused"),
    ("std-denormal", '{"heads": 2, "preprocessing": {"std": [1e-320, 1e-320, 1e-320]}}', "refused"),
    ("std-negative", '{"heads": 2, "preprocessing": {"std": [-1, -1, -1]}}', "either"),
    ("std-1e308", '{"heads": 2, "preprocessing": {"std": [1e308, 1e308, 1e308]}}', "either"),
    ("prep-image_size-60", '{"heads": 2, "preprocessing": {"image_size": 60}}', "refused"),
    ("prep-image_size-[32,0]", '{"heads": 2, "preprocessing": {"image_size": [32, 0]}}', "refused"),
    ("prep-image_size-8192", '{"heads": 2, "preprocessing": {"image_size": 8192}}', "refused"),
    ("prep-resize-nope", '{"heads": 2, "preprocessing": {"resize": "nope"}}', "refused"),
    ("prep-crop_pct-0", '{"heads": 2, "preprocessing": {"crop_pct": 0}}', "refused"),
    ("prep-crop_pct--1", '{"heads": 2, "preprocessing": {"crop_pct": -1}}', "refused"),
    ("prep-crop_pct-1e-9", '{"heads": 2, "preprocessing": {"crop_pct": 1e-9}}', "either"),
    ("prep-interpolation-x", '{"heads": 2, "preprocessing": {"interpolation": "x"}}', "refused"),
    ("prep-a-string", '{"heads": 2, "preprocessing": "imagenet"}', "refused"),
    ("prep-unknown-key", '{"heads": 2, "preprocessing": {"gamma": 2.2}}', "either"),
    (
        "class_names-wrong-length",
        '{"heads": 2, "class_names": ["a", "b", "c", "d", "e"]}',
        "either",
    ),
    ("class_names-a-string", '{"heads": 2, "class_names": "cat"}', "either"),
    ("class_names-numbers", '{"heads": 2, "class_names": [1, 2]}', "either"),
    ("class_names-nested", '{"heads": 2, "class_names": [[["a"]], {"b": 1}]}', "either"),
    ("class_names-deep", '{"heads": 2, "class_names": ' + DEEP_JSON + "}", "refused"),
    ("deeply-nested", '{"heads": 2, "x": ' + DEEP_JSON + "}", "refused"),
    ("deeply-nested-objects", '{"a": ' * 50_000 + "1" + "}" * 50_000, "refused"),
    ("not-json", "{heads: 2,", "refused"),
    ("a-list", "[2, 2]", "refused"),
    ("empty-object", "{}", "refused"),
    ("utf16", '{"heads": 2}'.encode("utf-16").decode("latin-1"), "refused"),
    ("unknown-key", '{"heads": 2, "bogus": 1}', "either"),
    ("huge-string", '{"heads": 2, "note": "' + "x" * 5_000_000 + '"}', "either"),
]


CI_SIDECARS = {
    "image_size-32.5",
    "image_size--1",
    "image_size-8192",
    "image_size-abc",
    "image_size-[0,0]",
    "image_size-true",
    "heads-0",
    "heads-3-dim-32",
    "heads-two",
    "depth-1e9",
    "mean-1e308",
    "mean-NaN",
    "mean-two-numbers",
    "mean-one-number",
    "std-0",
    "std-denormal",
    "prep-image_size-60",
    "prep-crop_pct-1e-9",
    "prep-resize-nope",
    "class_names-wrong-length",
    "class_names-deep",
    "deeply-nested",
    "not-json",
    "empty-object",
}


def sidecars(rng: random.Random, first: bool) -> list[Case]:
    """Absurd settings in ``<checkpoint>.vitviz.json`` (fixed list), plus seeded mixes of them."""
    cases = []
    if first:
        for name, text, expect in SIDECARS:
            cases.append(
                _ckpt(
                    f"sidecar/{name}",
                    tv_writer(tv_state, sidecar=text),
                    expect,
                    ci=name in CI_SIDECARS,
                )
            )
    picks = rng.sample([s for s in SIDECARS if s[1].startswith('{"heads": 2, "')], 2)
    merged: dict[str, Any] = {"heads": 2}
    try:
        for _, text, _ in picks:
            merged.update(json.loads(text))
    except (ValueError, RecursionError):
        return cases
    expect: Expect = "refused" if any(p[2] == "refused" for p in picks) else "either"
    names = "+".join(p[0] for p in picks)
    if "preprocessing" in json.loads(picks[0][1]) and "preprocessing" in json.loads(picks[1][1]):
        expect = "either"  # the second preprocessing dict replaced the first
    cases.append(
        _ckpt(
            f"sidecar/mix-{names}",
            tv_writer(tv_state, sidecar=json.dumps(merged, allow_nan=True)),
            expect,
            ci=False,
        )
    )
    return cases


def _config_change(**changes: Any) -> Callable[[dict[str, str]], dict[str, str]]:
    def change(meta: dict[str, str]) -> dict[str, str]:
        config = json.loads(meta["config"])
        config.update(changes)
        return {**meta, "config": json.dumps(config)}

    return change


def _meta(**changes: str) -> Callable[[dict[str, str]], dict[str, str]]:
    return lambda meta: {**meta, **changes}


def _prep_change(**changes: Any) -> Callable[[dict[str, str]], dict[str, str]]:
    def change(meta: dict[str, str]) -> dict[str, str]:
        prep = json.loads(meta["preprocessing"])
        prep.update(changes)
        return {**meta, "preprocessing": json.dumps(prep)}

    return change


def native_metadata(rng: random.Random, first: bool) -> list[Case]:
    """vitviz's own format with metadata that lies or is absurd: refused."""
    if not first:
        return []
    lies: dict[str, tuple[Callable[[dict[str, str]], dict[str, str]], Expect]] = {
        "config-heads-0": (_config_change(heads=0), "refused"),
        "config-heads-3": (_config_change(heads=3), "refused"),
        "config-patch_size-0": (_config_change(patch_size=0), "refused"),
        "config-image_size-1e9": (_config_change(image_size=[10**9, 10**9]), "refused"),
        "config-image_size-float": (_config_change(image_size=32.5), "refused"),
        "config-dim--1": (_config_change(dim=-1), "refused"),
        "config-depth-1e9": (_config_change(depth=10**9), "refused"),
        "config-num_classes--1": (_config_change(num_classes=-1), "refused"),
        "config-in_channels-0": (_config_change(in_channels=0), "refused"),
        "config-mlp_ratio-nan": (_config_change(mlp_ratio=float("nan")), "refused"),
        "config-pos_embed-bogus": (_config_change(pos_embed="bogus"), "refused"),
        "config-unknown-field": (_config_change(bogus=1), "refused"),
        "config-not-json": (_meta(config="{not json"), "refused"),
        "config-null": (_meta(config="null"), "refused"),
        "config-deep": (_meta(config=DEEP_JSON), "refused"),
        "no-config": (lambda m: {k: v for k, v in m.items() if k != "config"}, "refused"),
        "format_version-2": (_meta(format_version="2"), "refused"),
        "class_names-deep": (_meta(class_names=DEEP_JSON), "refused"),
        "class_names-object": (_meta(class_names='{"a": 1}'), "either"),
        "class_names-wrong-length": (_meta(class_names='["a"]'), "either"),
        "prep-mean-1e308": (_prep_change(mean=[1e308] * 3), "refused"),
        "prep-std-0": (_prep_change(std=[0, 0, 0]), "refused"),
        "prep-image_size-8192": (_prep_change(image_size=[8192, 8192]), "refused"),
        "prep-image_size-60": (_prep_change(image_size=[60, 60]), "refused"),
        "prep-not-json": (_meta(preprocessing="]["), "refused"),
        "provenance-deep": (_meta(provenance=DEEP_JSON), "either"),
    }
    in_ci = {
        "config-heads-3",
        "config-patch_size-0",
        "config-image_size-1e9",
        "config-depth-1e9",
        "config-in_channels-0",
        "config-not-json",
        "config-deep",
        "format_version-2",
        "class_names-deep",
        "prep-mean-1e308",
        "prep-std-0",
        "prep-image_size-8192",
    }
    return [
        _ckpt(f"native-lies/{key}", native_writer(change_meta=change), expect, ci=key in in_ci)
        for key, (change, expect) in lies.items()
    ]


CHECKPOINT_GENERATORS = [
    controls,
    dtypes,
    code_pickles,
    truncated_checkpoints,
    bitflipped_checkpoints,
    lying_safetensors,
    damaged_zips,
    wrong_shapes,
    non_finite,
    non_string_keys,
    sidecars,
    native_metadata,
]
