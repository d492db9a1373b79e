"""Safe loading (DESIGN §4, §8): nothing in a file runs; every bad file gets a plain message."""

from __future__ import annotations

import argparse
import os
import pickle
import random
from pathlib import Path

import pytest
import torch
from conftest import CLASS_NAMES, random_vit
from safetensors.torch import load_file, save_file

from vitviz.checkpoints import CheckpointError, load_checkpoint, read_checkpoint

# -- hostile pickles ---------------------------------------------------------------------------


class _OpensAFile:
    """Unpickling this calls open(path, "w"): the file appears if the pickle ever runs."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


class _RunsACommand:
    """Unpickling this runs os.system("touch path")."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f"touch '{self.path}'",))


def _write_pickle(path: Path, obj: object, how: str) -> None:
    if how == "torch.save":
        torch.save(obj, path)
    elif how == "pickle-default":
        with open(path, "wb") as f:
            pickle.dump(obj, f)
    else:
        with open(path, "wb") as f:
            pickle.dump(obj, f, protocol=2)


HOSTILE = [
    ("open", "torch.save"),
    ("open", "pickle-default"),
    ("open", "pickle-2"),
    ("system", "torch.save"),
    ("system", "pickle-default"),
]


def _hostile(tmp_path: Path, payload: str, how: str) -> tuple[Path, Path]:
    witness = tmp_path / "pwned.txt"
    evil = (_OpensAFile if payload == "open" else _RunsACommand)(witness)
    sd = random_vit().state_dict()
    path = tmp_path / "evil.pth"
    _write_pickle(path, {"model": sd, "hook": evil}, how)
    return path, witness


@pytest.mark.parametrize(("payload", "how"), HOSTILE)
def test_hostile_pickle_is_refused_and_never_runs(tmp_path: Path, payload: str, how: str) -> None:
    path, witness = _hostile(tmp_path, payload, how)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert not witness.exists(), "the pickle's code ran"
    assert "evil.pth" in str(info.value)
    # The lower-level reader refuses it too.
    with pytest.raises(CheckpointError):
        read_checkpoint(path)
    assert not witness.exists()


@pytest.mark.parametrize(("payload", "how"), HOSTILE)
def test_hostile_pickle_message_says_it_needs_code(tmp_path: Path, payload: str, how: str) -> None:
    """DESIGN §4: 'A pickle that needs arbitrary code is refused with a message that says so'."""
    path, witness = _hostile(tmp_path, payload, how)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert "code" in msg.lower(), msg
    assert "truncated" not in msg.lower(), msg  # it is not damaged, it is refused
    assert not witness.exists()


@pytest.mark.parametrize("name", ["evil.safetensors", "evil.ckpt", "evil.bin", "evil"])
def test_hostile_pickle_under_any_name_never_runs(tmp_path: Path, name: str) -> None:
    witness = tmp_path / "pwned.txt"
    path = tmp_path / name
    torch.save({"weights": torch.zeros(2), "x": _RunsACommand(witness)}, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert name in str(info.value)
    assert not witness.exists()


def test_whole_saved_module_asks_for_a_state_dict(tmp_path: Path) -> None:
    path = tmp_path / "whole.pth"
    torch.save(random_vit(), path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert "whole.pth" in msg
    assert "state dict" in msg.lower()
    assert "VisionTransformer" in msg  # names what it found


def test_checkpoint_with_training_args_namespace_opens(tmp_path: Path) -> None:
    """timm train.py keeps its argparse.Namespace beside the weights: admitted (data only), and
    its entries read as the checkpoint's extra (test_training_checkpoints has the rest)."""
    path = tmp_path / "train.pth"
    torch.save({"model": random_vit().state_dict(), "args": argparse.Namespace(lr=0.1)}, path)
    raw = read_checkpoint(path)
    assert raw.extra["args"] == {"lr": 0.1}
    assert "blocks.0.attn.qkv.weight" in raw.state


# -- damaged and wrong files -------------------------------------------------------------------


def _state_pth(tmp_path: Path) -> Path:
    path = tmp_path / "sd.pth"
    torch.save(random_vit().state_dict(), path)
    return path


def _cut_in_half(src: Path, dst: Path) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])
    return dst


def _lfs_pointer(path: Path) -> Path:
    path.write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
        "size 346284\n"
    )
    return path


# Fixed noise: os.urandom's bytes now and then open with a pickle opcode and read as a pickle
# that needs code, another (also correct) refusal than the one this case tests
NOISE = random.Random(0).randbytes(4096)

BAD_FILES = {
    "truncated-safetensors": (
        lambda d, ck: _cut_in_half(ck, d / "half.safetensors"),
        "half.safetensors",
        "truncated",
    ),
    "truncated-pth": (
        lambda d, ck: _cut_in_half(_state_pth(d), d / "half.pth"),
        "half.pth",
        "truncated",
    ),
    "zero-bytes": (
        lambda d, ck: (d / "empty.pth").touch() or d / "empty.pth",
        "empty.pth",
        "empty",
    ),
    "random-pth": (
        lambda d, ck: (d / "noise.pth").write_bytes(NOISE) and d / "noise.pth",
        "noise.pth",
        "not a",
    ),
    "random-safetensors": (
        lambda d, ck: (d / "noise.safetensors").write_bytes(NOISE) and d / "noise.safetensors",
        "noise.safetensors",
        "not a readable",
    ),
    "lfs-pointer": (lambda d, ck: _lfs_pointer(d / "vit.safetensors"), "vit.safetensors", "lfs"),
    "lfs-pointer-pth": (lambda d, ck: _lfs_pointer(d / "vit.pth"), "vit.pth", "lfs"),
    "folder": (
        lambda d, ck: (d / "weights.pth").mkdir() or d / "weights.pth",
        "weights.pth",
        "folder",
    ),
    "missing": (lambda d, ck: d / "nowhere.safetensors", "nowhere.safetensors", "no such file"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file_is_a_checkpoint_error_naming_file_and_problem(
    tmp_path: Path, tiny_ckpt: Path, case: str
) -> None:
    make, name, problem = BAD_FILES[case]
    path = make(tmp_path, tiny_ckpt)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert name in msg
    assert problem in msg.lower()
    assert "\n" not in msg  # one plain line


def test_a_text_file_is_refused_without_a_bare_lookup_key(tmp_path: Path) -> None:
    """torch.load of text raises KeyError(<a byte's code>): the line says what the file is not,
    not a meaningless number."""
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert msg.startswith("notes.txt is not a PyTorch or safetensors checkpoint"), msg
    assert "damaged. Accepted" in msg, msg


def test_pickled_tensor_without_weights_dict_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tensor.pth"
    torch.save(torch.zeros(3), path)
    with pytest.raises(CheckpointError, match=r"tensor\.pth"):
        load_checkpoint(path)


def test_unknown_layout_names_first_keys_and_accepted_formats(tmp_path: Path) -> None:
    path = tmp_path / "other.pth"
    torch.save({"features.0.weight": torch.zeros(4, 3, 3, 3), "fc.bias": torch.zeros(4)}, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert "other.pth" in msg
    assert "features.0.weight" in msg
    assert "Accepted" in msg


# -- shape mismatches --------------------------------------------------------------------------


def _with_wrong_head(tiny_ckpt: Path, dst: Path, keep_metadata: bool) -> Path:
    from safetensors import safe_open

    state = load_file(str(tiny_ckpt))
    state["head.weight"] = torch.zeros(7, state["head.weight"].shape[1])
    meta = None
    if keep_metadata:
        with safe_open(str(tiny_ckpt), framework="pt") as f:
            meta = f.metadata()
    save_file(state, str(dst), metadata=meta)
    return dst


def test_wrong_shape_via_config_names_the_key(tmp_path: Path, tiny_ckpt: Path, tiny_model) -> None:
    bad = _with_wrong_head(tiny_ckpt, tmp_path / "bad.safetensors", keep_metadata=False)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(bad, config=tiny_model.config.to_dict())
    msg = str(info.value)
    assert "head.weight" in msg
    assert "(7, 32)" in msg
    assert "(5, 32)" in msg


def test_wrong_shape_in_a_native_file_names_the_key(tmp_path: Path, tiny_ckpt: Path) -> None:
    bad = _with_wrong_head(tiny_ckpt, tmp_path / "bad.safetensors", keep_metadata=True)
    with pytest.raises(CheckpointError, match=r"head\.weight"):
        load_checkpoint(bad)


def test_missing_and_unexpected_keys_are_named(tmp_path: Path, tiny_model) -> None:
    sd = dict(tiny_model.state_dict())
    del sd["blocks.1.attn.qkv.weight"]
    sd["blocks.1.attn.extra"] = torch.zeros(2)
    path = tmp_path / "sd.pth"
    torch.save(sd, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, config=tiny_model.config.to_dict())
    msg = str(info.value)
    assert "blocks.1.attn.qkv.weight" in msg
    assert "blocks.1.attn.extra" in msg


def test_invalid_config_is_a_checkpoint_error(tmp_path: Path, tiny_model) -> None:
    path = tmp_path / "sd.pth"
    torch.save(tiny_model.state_dict(), path)
    cfg = {**tiny_model.config.to_dict(), "heads": 3}  # 32 not divisible by 3
    with pytest.raises(CheckpointError, match="divisible"):
        load_checkpoint(path, config=cfg)
    with pytest.raises(CheckpointError, match="no_such_field"):
        load_checkpoint(path, config={**tiny_model.config.to_dict(), "no_such_field": 1})


# -- wrappers ----------------------------------------------------------------------------------


def _prefixed(sd: dict, prefix: str) -> dict:
    return {prefix + k: v for k, v in sd.items()}


WRAPPERS = {
    "plain": lambda sd: sd,
    "model": lambda sd: {"model": sd},
    "state_dict": lambda sd: {"state_dict": sd, "epoch": 12, "optimizer": {"lr": 0.1}},
    "module.": lambda sd: _prefixed(sd, "module."),
    "_orig_mod.": lambda sd: _prefixed(sd, "_orig_mod."),
    "state_dict+module.": lambda sd: {"state_dict": _prefixed(sd, "module.")},
    "model+module._orig_mod.": lambda sd: {"model": _prefixed(sd, "module._orig_mod.")},
}


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_wrappers_and_prefixes_are_unwrapped(tmp_path: Path, tiny_model, wrapper: str) -> None:
    path = tmp_path / "wrapped.pth"
    torch.save(WRAPPERS[wrapper](tiny_model.state_dict()), path)
    loaded = load_checkpoint(path, config=tiny_model.config.to_dict())
    assert loaded.config == tiny_model.config
    assert not loaded.model.training
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded.model(x), tiny_model(x))


def test_plain_safetensors_state_dict_with_config(tmp_path: Path, tiny_model) -> None:
    path = tmp_path / "plain.safetensors"
    save_file(_prefixed(dict(tiny_model.state_dict()), "module."), str(path))
    spec = {**tiny_model.config.to_dict(), "class_names": CLASS_NAMES}
    loaded = load_checkpoint(path, config=spec)
    assert loaded.class_names == CLASS_NAMES
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded.model(x), tiny_model(x))


def test_embedded_config_is_used_without_being_asked(tmp_path: Path, tiny_model) -> None:
    path = tmp_path / "with_config.pth"
    torch.save({"model": tiny_model.state_dict(), "config": tiny_model.config.to_dict()}, path)
    loaded = load_checkpoint(path)
    assert loaded.config == tiny_model.config
    assert len(loaded.class_names) == tiny_model.config.num_classes
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded.model(x), tiny_model(x))


def test_own_layout_without_any_config_is_not_understood(tmp_path: Path, tiny_model) -> None:
    path = tmp_path / "sd.pth"
    torch.save(tiny_model.state_dict(), path)
    with pytest.raises(CheckpointError, match=r"sd\.pth"):
        load_checkpoint(path)


def test_a_key_that_is_not_a_name_is_refused_by_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "odd.pth"
    torch.save({"model": {("block", 0): torch.zeros(2), "w": torch.zeros(2)}}, path)
    with pytest.raises(CheckpointError, match=r"odd\.pth: .*not a name \(\('block', 0\) of type"):
        read_checkpoint(path)


@pytest.mark.parametrize(
    ("dtype", "key", "refused"),
    [
        (torch.float16, "blocks.0.attn.qkv.weight", False),
        (torch.bfloat16, "cls_token", False),
        (torch.float64, "head.bias", False),
        (torch.int8, "blocks.0.attn.qkv.weight", True),
        (torch.bool, "head.bias", True),
        (torch.complex64, "cls_token", True),
        (torch.int64, "position_ids", False),  # an index buffer some families drop
    ],
)
def test_floats_become_float32_and_integer_weights_are_refused(
    dtype: torch.dtype, key: str, refused: bool
) -> None:
    from vitviz.checkpoints.reading import to_float

    state = {key: torch.ones(2, 3).to(dtype)}
    if refused:
        with pytest.raises(CheckpointError, match=f"{key} holds {str(dtype)[6:]} numbers"):
            to_float(state, torch.float32, "w.pth")
        return
    notes = to_float(state, torch.float32, "w.pth")
    want = torch.float32 if dtype.is_floating_point else dtype
    assert state[key].dtype == want
    assert bool(notes) == (dtype.is_floating_point and dtype != torch.float32)


def test_a_pipe_named_like_a_checkpoint_is_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "weights.pth"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    with pytest.raises(CheckpointError, match=r"weights\.pth is not a regular file"):
        load_checkpoint(fifo)


def test_the_oldest_tar_format_is_refused_without_unpacking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.load unpacks a tar checkpoint into a temporary folder: vitviz refuses it first."""
    import io
    import tarfile
    import tempfile

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    path = tmp_path / "ancient.pt"
    with tarfile.open(path, mode="w") as tar:
        for name in ("sys_info", "pickle", "storages", "tensors"):
            data = pickle.dumps({"protocol_version": 1001} if name == "sys_info" else 0)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(CheckpointError, match=r"ancient\.pt is in PyTorch's oldest \(tar\) format"):
        load_checkpoint(path)
    assert not list(temp.iterdir())
