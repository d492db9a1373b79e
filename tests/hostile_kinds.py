"""Hostile checkpoints of the newer kinds and families (see hostile_files.py for ``Case``).

Seeds: one valid tiny checkpoint of each (the kinds' own test helpers: perturbed weights), as
the library writes it: timm's folder (config.json + model.safetensors) of VOLO, MobileViT,
LeViT, MViTv2, TNT, CrossViT, ConViT, PiT and Sapiens2 (timm's Eva with grouped-query
attention), transformers' MobileViT folder, and a bare Sapiens2 state dict under Meta's names
with its settings in a sidecar. Mutations of each: a tensor dropped, renamed, reshaped, made
NaN, cast to another dtype; the weights file cut short or missing; config.json not JSON, a list,
or a field of the wrong type, out of range or missing; timm's ``pretrained_cfg`` with an odd
``input_size``; ``model_args`` with dims that would allocate GBs, zero heads, key/value heads
that don't divide the heads.

Every case carries its ``reference``: the library's own model (the seed's architecture, built
by the library) holding the file's tensors, strictly. A case vitviz accepts must run as that
model does (fuzz_harness compares the logits); one the library's model can't take must be
refused. torch, timm and transformers are imported when a case is written, not when listed.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from hostile_files import Case, Expect

TESTS = Path(__file__).resolve().parent
Files = dict[str, bytes]  # relative name -> bytes: a seed as written
State = dict[str, Any]  # name -> torch.Tensor


def _helpers(kind: str) -> Any:
    """tests/kinds/<kind>/<kind>_helpers (pytest puts the folder on sys.path; the benchmark
    doesn't)."""
    import importlib

    folder = str(TESTS / "kinds" / kind)
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module(f"{kind}_helpers")


# --------------------------------------------------------------------------- seeds


@dataclass(frozen=True)
class Seed:
    """How one seed is made and how the library rebuilds it.

    ``build()``: the library's model (perturbed weights); ``save(model, folder) -> path``:
    the files vitviz is given; ``weights``: the weights file inside a folder ("" for a bare
    file); ``to_library(state)``: the file's tensors as the library's model names them."""

    build: Callable[[], Any]
    save: Callable[[Any, Path], Path]
    weights: str = "model.safetensors"
    to_library: Callable[[State], State] | None = None
    timm: bool = True  # a timm folder (config.json has timm's fields)
    bgr: bool = False  # the library's model is fed BGR (vitviz's takes RGB)


def _timm_save(kind: str) -> Callable[[Any, Path], Path]:
    """The kind's own helper's save_folder (some pass model args timm's folder needs)."""
    return lambda model, folder: _helpers(kind).save_folder(model, folder / "ckpt")


def _timm_folder(model: Any, folder: Path) -> Path:
    from timm.models import save_for_hf

    save_for_hf(model, folder / "ckpt", safe_serialization=True)
    return folder / "ckpt"


def _hf_save(model: Any, folder: Path) -> Path:
    model.save_pretrained(folder / "ckpt")
    return folder / "ckpt"


def _sapiens2() -> Any:
    import timm
    import torch
    from timm.models.eva import _sapiens2_args
    from zoo_helpers import randomize_

    kv = tuple(_sapiens2_args(64, 4, 4, 2, num_full_attn_blocks=1)["num_kv_heads"])
    torch.manual_seed(1)
    model = timm.create_model(
        "vit_base_patch16_sapiens2", pretrained=False, img_size=32, patch_size=8, embed_dim=64,
        depth=4, num_heads=4, num_kv_heads=kv, num_classes=3,
    )  # fmt: skip
    return randomize_(model, seed=1)


META_NAMES = (  # timm's Sapiens2 block names -> Meta's
    (".attn.q_proj.", ".attn.wq."), (".attn.k_proj.", ".attn.wk."), (".attn.v_proj.", ".attn.wv."),
    (".gamma_1", ".attn.gamma.weight"), (".mlp.fc1.", ".ffn.w12."), (".mlp.fc2.", ".ffn.w3."),
    (".norm1.", ".ln1."), (".norm2.", ".ln2."),
)  # fmt: skip
META_TOP = (("reg_token", "storage_tokens"), ("norm.", "ln1."),
            ("patch_embed.proj.", "patch_embed.projection."))  # fmt: skip


def _meta_name(k: str) -> str:
    if k.startswith("blocks."):
        for timm_name, meta in META_NAMES:
            k = k.replace(timm_name, meta)
        return k
    for timm_name, meta in META_TOP:
        if k.startswith(timm_name):
            return meta + k[len(timm_name) :]
    return k


def _sapiens2_meta_save(model: Any, folder: Path) -> Path:
    """A bare state dict under Meta's names (with the pretraining mask token), and a sidecar
    with what such a file does not say."""
    import torch

    state = {_meta_name(k): v for k, v in model.state_dict().items()}
    state["mask_token"] = torch.zeros(1, state["cls_token"].shape[-1])
    path = folder / "sapiens2_meta.pth"
    torch.save(state, path)
    settings = {"arch": "vit_base_patch16_sapiens2", "image_size": [32, 32]}
    (folder / "sapiens2_meta.pth.vitviz.json").write_text(json.dumps(settings))
    return path


def _from_meta(state: State) -> State:
    """Meta's Sapiens2 names as timm's (timm's own checkpoint_filter_fn)."""
    from timm.models.eva import checkpoint_filter_fn

    return checkpoint_filter_fn(dict(state), _sapiens2_model())


@cache
def _sapiens2_model() -> Any:
    return _sapiens2()


def seeds() -> dict[str, Seed]:
    """Every seed by name (nothing is built until a seed's ``build`` runs)."""
    h = _helpers
    return {
        "volo": Seed(lambda: h("volo").tiny_timm_volo(seed=1), _timm_save("volo")),
        "mobilevit-timm": Seed(lambda: h("mobilevit").timm_xxs(seed=2), _timm_save("mobilevit")),
        "mobilevit-bare": Seed(
            lambda: h("mobilevit").tiny_timm_mobilevit(seed=1),
            _mobilevit_bare,
            weights="",
            timm=False,
        ),
        "mobilevit-hf": Seed(
            lambda: h("mobilevit").tiny_hf_mobilevit(seed=3), _hf_save, timm=False, bgr=True
        ),
        "levit": Seed(lambda: h("levit").tiny_timm_levit(seed=1), _timm_save("levit")),
        "mvit-bare": Seed(
            lambda: h("mvit").tiny_timm_mvit(seed=1),
            _bare({"arch": "mvitv2_tiny"}),
            weights="",
            timm=False,
        ),
        "tnt": Seed(_tnt, _tnt_folder),
        "crossvit": Seed(lambda: h("crossvit").tiny_timm_crossvit(seed=1), _timm_save("crossvit")),
        "convit": Seed(_convit, _timm_folder),
        "pit": Seed(lambda: h("pit").tiny_timm_pit(seed=1), _timm_save("pit")),
        "sapiens2": Seed(_sapiens2, _timm_folder),
        "sapiens2-meta": Seed(
            _sapiens2, _sapiens2_meta_save, weights="", to_library=_from_meta, timm=False
        ),
    }


def _mobilevit_bare(model: Any, folder: Path) -> Path:
    """timm's ByobNet with MobileViT blocks as a bare state dict, its settings in a sidecar."""
    helpers = _helpers("mobilevit")
    return helpers.save_bare(model, folder / "mobilevit.pth", helpers.BARE_SETTINGS)


def _bare(settings: dict[str, Any]) -> Callable[[Any, Path], Path]:
    def save(model: Any, folder: Path) -> Path:
        import torch

        path = folder / "bare.pth"
        torch.save(model.state_dict(), path)
        (folder / "bare.pth.vitviz.json").write_text(json.dumps(settings))
        return path

    return save


TNT_ARGS = dict(embed_dim=24, inner_dim=8, depth=2, num_heads_outer=3, num_heads_inner=2)


def _tnt() -> Any:
    """timm's tnt_b_patch16_224 at 32 px, patch 8 and tiny widths (its folder's model_args)."""
    import timm
    from zoo_helpers import randomize_

    model = timm.create_model(
        "tnt_b_patch16_224", pretrained=False, num_classes=3, img_size=32, patch_size=8,
        **TNT_ARGS,
    )  # fmt: skip
    return randomize_(model, seed=7)


def _tnt_folder(model: Any, folder: Path) -> Path:
    return _helpers("tnt").save_folder(model, folder / "ckpt", patch_size=8, **TNT_ARGS)


def _convit() -> Any:
    import timm
    import torch
    from zoo_helpers import randomize_

    torch.manual_seed(0)
    model = timm.create_model(
        "convit_tiny", pretrained=False, num_classes=5, img_size=32, patch_size=8, embed_dim=8,
        depth=3, local_up_to_layer=2, num_heads=4,
    )  # fmt: skip
    return randomize_(model, seed=0)


@cache
def seed_files(name: str) -> tuple[Files, str]:
    """The seed's files (relative name -> bytes) and the relative path vitviz is given."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        spec = seeds()[name]
        path = spec.save(_built(name), folder)
        files = {
            str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()
        }
        return files, str(path.relative_to(folder))


@cache
def _built(name: str) -> Any:
    return seeds()[name].build()


def weights_name(name: str) -> str:
    _, given = seed_files(name)
    spec = seeds()[name]
    return given if not spec.weights else f"{given}/{spec.weights}"


def read_state(data: bytes, weights: str) -> State:
    """Tensors of a weights file's bytes (safetensors or weights_only torch.load)."""
    import io

    import torch

    if weights.endswith(".safetensors"):
        from safetensors.torch import load

        return dict(load(data))
    return dict(torch.load(io.BytesIO(data), weights_only=True))


def write_state(state: State, weights: str) -> bytes:
    import io

    import torch

    if weights.endswith(".safetensors"):
        from safetensors.torch import save

        return save({k: v.contiguous() for k, v in state.items()}, metadata={"format": "pt"})
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


# --------------------------------------------------------------------------- the reference


def reference(name: str) -> Callable[[Path], Any]:
    """``ref(path)``: the library's model of seed ``name`` (its architecture, the library's
    build) holding the tensors of the file at ``path`` (cast to float32), loaded strictly; it
    raises when the library's model can't take them."""

    def ref(path: Path) -> Any:
        import copy

        spec = seeds()[name]
        weights = path / spec.weights if spec.weights else path
        state = read_state(weights.read_bytes(), str(weights))
        if spec.to_library is not None:
            state = spec.to_library(state)
        for k, v in state.items():
            if (
                not v.is_floating_point()
                and not k.endswith("num_batches_tracked")
                and ("index" not in k)
            ):
                raise ValueError(f"{k}: {v.dtype} where the library holds floats")
        model = copy.deepcopy(_built(name))
        state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
        model.load_state_dict(state, strict=True)
        model.eval()
        if not spec.bgr:
            return model
        # transformers' MobileViT is fed BGR by its image processor: vitviz's model takes RGB
        return lambda x: model(pixel_values=x.flip(1))

    return ref


# --------------------------------------------------------------------------- mutations


def _kind_case(
    seed: str,
    variant: str,
    change: Callable[[Files, str], Files],
    expect: Expect = "either",
    ci: bool = False,
) -> Case:
    def write(folder: Path) -> Path:
        files, given = seed_files(seed)
        for rel, data in change(dict(files), weights_name(seed)).items():
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return folder / given

    return Case(
        f"kind-{seed}/{variant}", "checkpoint", write, expect, ci=ci, reference=reference(seed)
    )


def _tensors(change: Callable[[State], State]) -> Callable[[Files, str], Files]:
    def apply(files: Files, weights: str) -> Files:
        state = change(read_state(files[weights], weights))
        return {**files, weights: write_state(state, weights)}

    return apply


def _config(change: Callable[[Any], Any]) -> Callable[[Files, str], Files]:
    """config.json (of a folder) read, changed (returns the new object) and written back."""

    def apply(files: Files, weights: str) -> Files:
        rel = next((k for k in files if k.endswith("config.json")), None)
        if rel is None:  # a bare file: its sidecar holds the settings
            rel = next(k for k in files if k.endswith(".vitviz.json"))
        new = change(json.loads(files[rel]))
        text = new if isinstance(new, str) else json.dumps(new, allow_nan=True)
        return {**files, rel: text.encode()}

    return apply


def _drop(key_pick: Callable[[list[str]], str]) -> Callable[[State], State]:
    def change(state: State) -> State:
        key = key_pick(sorted(state))
        return {k: v for k, v in state.items() if k != key}

    return change


def _rename(key_pick: Callable[[list[str]], str]) -> Callable[[State], State]:
    def change(state: State) -> State:
        key = key_pick(sorted(state))
        return {(k.replace(".", "._", 1) if k == key else k): v for k, v in state.items()}

    return change


def _reshape(key_pick: Callable[[list[str]], str], how: str) -> Callable[[State], State]:
    def change(state: State) -> State:
        key = key_pick(sorted(state))
        t = state[key]
        if how == "transpose" and t.ndim >= 2:
            t = t.transpose(0, 1).contiguous()
        elif how == "shorter" and t.ndim >= 1 and t.shape[0] > 1:
            t = t[: t.shape[0] - 1].contiguous()
        elif how == "longer":
            t = __import__("torch").cat([t, t[:1]]) if t.ndim >= 1 else t.reshape(1)
        else:  # a flat copy
            t = t.reshape(-1).contiguous()
        return {**state, key: t}

    return change


def _poison(key_pick: Callable[[list[str]], str], value: float, everywhere: bool):
    def change(state: State) -> State:
        key = key_pick(sorted(state))
        t = state[key].clone()
        if not t.is_floating_point():
            return state
        if everywhere:
            t.fill_(value)
        else:
            t.view(-1)[0] = value
        return {**state, key: t}

    return change


def _cast(dtype: str, key_pick: Callable[[list[str]], str] | None = None):
    def change(state: State) -> State:
        import torch

        d = getattr(torch, dtype)
        key = key_pick(sorted(state)) if key_pick else None
        return {
            k: v.to(d) if v.is_floating_point() and (key is None or k == key) else v
            for k, v in state.items()
        }

    return change


def _float_keys(state_keys: list[str]) -> list[str]:
    return [k for k in state_keys if not k.endswith(("num_batches_tracked", "_index"))]


def _head(keys: list[str]) -> str:
    """The classifier's weight (the last 2-D weight named like a head)."""
    heads = [k for k in keys if ("head" in k or "classifier" in k) and k.endswith("weight")]
    return heads[-1] if heads else keys[-1]


def _attn_weight(keys: list[str]) -> str:
    """An attention projection's weight (q/k/v or the fused qkv)."""
    attn = [k for k in keys if "attn" in k or "attention" in k]
    picks = [k for k in attn if k.endswith("weight") and ("qkv" in k or "k_proj" in k)]
    return (picks or attn or keys)[0]


def _truncate(fraction: float) -> Callable[[Files, str], Files]:
    def apply(files: Files, weights: str) -> Files:
        data = files[weights]
        return {**files, weights: data[: max(1, int(len(data) * fraction))]}

    return apply


def _remove(which: str) -> Callable[[Files, str], Files]:
    def apply(files: Files, weights: str) -> Files:
        rel = weights if which == "weights" else next(k for k in files if k.endswith(which))
        return {k: v for k, v in files.items() if k != rel}

    return apply


def _raw_config(text: str) -> Callable[[Files, str], Files]:
    return _config(lambda _c: text)


def _set(path: tuple[str, ...], value: Any) -> Callable[[Any], Any]:
    """config[path[0]][path[1]]... = value (made where missing); value ``DELETE``: removed."""

    def change(config: Any) -> Any:
        node = config
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        if value is DELETE:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
        return config

    return change


DELETE = object()
BIG = 10**7  # a width that would need tens of GB
NAN = float("nan")

# timm's config.json: (field path, value, expect). Every value is wrong for the seed.
TIMM_CONFIG: list[tuple[str, tuple[str, ...], Any, Expect]] = [
    ("architecture-int", ("architecture",), 123, "either"),
    ("architecture-unknown", ("architecture",), "no_such_model_224", "either"),
    ("architecture-missing", ("architecture",), DELETE, "either"),
    ("architecture-list", ("architecture",), ["volo_d1_224"], "either"),
    ("num_classes-string", ("num_classes",), "5", "either"),
    ("num_classes-negative", ("num_classes",), -1, "either"),
    ("num_classes-zero", ("num_classes",), 0, "either"),
    ("num_classes-1e9", ("num_classes",), 10**9, "either"),
    ("num_classes-float", ("num_classes",), 2.5, "either"),
    ("num_features-huge", ("num_features",), BIG, "either"),
    ("input_size-odd", ("pretrained_cfg", "input_size"), [3, 7, 13], "either"),
    ("input_size-huge", ("pretrained_cfg", "input_size"), [3, 100000, 100000], "either"),
    ("input_size-short", ("pretrained_cfg", "input_size"), [3], "either"),
    ("input_size-string", ("pretrained_cfg", "input_size"), "abc", "either"),
    ("input_size-zero", ("pretrained_cfg", "input_size"), [3, 0, 0], "either"),
    ("input_size-1-channel", ("pretrained_cfg", "input_size"), [1, 64, 64], "either"),
    ("input_size-negative", ("pretrained_cfg", "input_size"), [3, -64, 64], "either"),
    ("input_size-float", ("pretrained_cfg", "input_size"), [3, 64.5, 64.5], "either"),
    ("input_size-null", ("pretrained_cfg", "input_size"), None, "either"),
    ("input_size-nan", ("pretrained_cfg", "input_size"), [3, NAN, NAN], "either"),
    ("mean-nan", ("pretrained_cfg", "mean"), [NAN, NAN, NAN], "refused"),
    ("std-zero", ("pretrained_cfg", "std"), [0, 0, 0], "refused"),
    ("crop_pct-zero", ("pretrained_cfg", "crop_pct"), 0, "either"),
    ("interpolation-bogus", ("pretrained_cfg", "interpolation"), "magic", "either"),
    ("pretrained_cfg-string", ("pretrained_cfg",), "imagenet", "either"),
    ("pretrained_cfg-missing", ("pretrained_cfg",), DELETE, "either"),
    ("label_names-deep", ("label_names",), [[["a"]], {"b": 1}], "either"),
    ("model_args-embed_dim-huge", ("model_args", "embed_dim"), BIG, "either"),
    ("model_args-depth-huge", ("model_args", "depth"), 10**6, "either"),
    ("model_args-img_size-huge", ("model_args", "img_size"), 10**6, "either"),
    ("model_args-num_heads-zero", ("model_args", "num_heads"), 0, "either"),
    ("model_args-num_heads-3", ("model_args", "num_heads"), 3, "either"),
    ("model_args-num_kv_heads-3", ("model_args", "num_kv_heads"), 3, "either"),
    ("model_args-num_kv_heads-0", ("model_args", "num_kv_heads"), 0, "either"),
    ("model_args-a-list", ("model_args",), [1, 2], "either"),
    ("model_args-unknown", ("model_args", "bogus_kwarg"), 1, "either"),
    ("model_args-patch_size-0", ("model_args", "patch_size"), 0, "either"),
    ("model_args-in_chans-0", ("model_args", "in_chans"), 0, "either"),
]

# transformers' MobileViT config.json
HF_CONFIG: list[tuple[str, tuple[str, ...], Any, Expect]] = [
    ("model_type-missing", ("model_type",), DELETE, "either"),
    ("model_type-bogus", ("model_type",), "not_a_model", "either"),
    ("architectures-int", ("architectures",), 5, "either"),
    ("image_size-huge", ("image_size",), 100000, "either"),
    ("image_size-zero", ("image_size",), 0, "either"),
    ("image_size-string", ("image_size",), "64", "either"),
    ("patch_size-zero", ("patch_size",), 0, "either"),
    ("patch_size-3", ("patch_size",), 3, "either"),
    ("num_attention_heads-zero", ("num_attention_heads",), 0, "either"),
    ("num_attention_heads-3", ("num_attention_heads",), 3, "either"),
    ("num_attention_heads-string", ("num_attention_heads",), "2", "either"),
    ("hidden_sizes-huge", ("hidden_sizes",), [BIG, BIG, BIG], "either"),
    ("hidden_sizes-short", ("hidden_sizes",), [16], "either"),
    ("hidden_sizes-string", ("hidden_sizes",), "16,16,24", "either"),
    ("neck_hidden_sizes-short", ("neck_hidden_sizes",), [8, 8], "either"),
    ("neck_hidden_sizes-huge", ("neck_hidden_sizes",), [BIG] * 7, "either"),
    ("expand_ratio-zero", ("expand_ratio",), 0, "either"),
    ("expand_ratio-nan", ("expand_ratio",), NAN, "either"),
    ("mlp_ratio-huge", ("mlp_ratio",), 1e6, "either"),
    ("num_channels-0", ("num_channels",), 0, "either"),
    ("layer_norm_eps-string", ("layer_norm_eps",), "x", "either"),
    ("layer_norm_eps-negative", ("layer_norm_eps",), -1.0, "either"),
    ("hidden_act-bogus", ("hidden_act",), "nope", "either"),
    ("id2label-list", ("id2label",), ["a", "b"], "either"),
    ("id2label-wrong-count", ("id2label",), {"0": "a"}, "either"),
    ("num_labels-zero", ("num_labels",), 0, "either"),
    ("conv_kernel_size-even", ("conv_kernel_size",), 4, "either"),
    ("qkv_bias-string", ("qkv_bias",), "no", "either"),
]

# a bare file's sidecar (Sapiens2 under Meta's names, MViTv2)
SIDECAR_CONFIG: list[tuple[str, tuple[str, ...], Any, Expect]] = [
    ("arch-missing", ("arch",), DELETE, "either"),
    ("arch-int", ("arch",), 5, "refused"),
    ("arch-other-kind", ("arch",), "volo_d1_224", "either"),
    ("image_size-huge", ("image_size",), [100000, 100000], "either"),
    ("image_size-odd", ("image_size",), [31, 13], "either"),
    ("image_size-zero", ("image_size",), [0, 0], "refused"),
    ("heads-0", ("heads",), 0, "refused"),
    ("heads-3", ("heads",), 3, "either"),
    ("kv_heads-3", ("kv_heads",), [3, 3, 3, 3], "either"),
    ("kv_heads-0", ("kv_heads",), 0, "either"),
]


# the bare MobileViT's sidecar
MOBILEVIT_SIDECAR: list[tuple[str, tuple[str, ...], Any, Expect]] = [
    ("stage_heads-zero", ("stage_heads",), [0, 0, 0, 0], "either"),
    ("stage_heads-3", ("stage_heads",), [0, 0, 3, 3], "either"),
    ("stage_heads-huge", ("stage_heads",), [0, 0, BIG, BIG], "either"),
    ("stage_heads-short", ("stage_heads",), [2], "either"),
    ("stage_heads-string", ("stage_heads",), "2", "either"),
    ("patch_size-0", ("patch_size",), 0, "either"),
    ("patch_size-huge", ("patch_size",), BIG, "either"),
    ("patch_size-3", ("patch_size",), 3, "either"),
    ("strides-zero", ("strides",), [0, 0, 0, 0], "either"),
    ("strides-huge", ("strides",), [1, 2, 2, BIG], "either"),
    ("strides-missing", ("strides",), DELETE, "either"),
    ("image_size-huge", ("image_size",), [100000, 100000], "either"),
    ("image_size-odd", ("image_size",), [37, 13], "either"),
]


def _table(seed: str) -> list[tuple[str, tuple[str, ...], Any, Expect]]:
    spec = seeds()[seed]
    if spec.timm:
        return TIMM_CONFIG
    if spec.weights:
        return HF_CONFIG
    return MOBILEVIT_SIDECAR if seed.startswith("mobilevit") else SIDECAR_CONFIG


# the CI subset's share (tests/project/test_fuzz.py): a handful, each a few seconds
CI_CASES = {
    "kind-volo/control",
    "kind-levit/control",
    "kind-sapiens2/model_args-num_kv_heads-3",
    "kind-sapiens2-meta/heads-3",
    "kind-mobilevit-hf/num_attention_heads-3",
    "kind-mvit-bare/nan-attn",
    "kind-crossvit/reshape-attn-shorter",
    "kind-convit/truncated-half",
}


def _fixed(seed: str) -> list[Case]:
    spec = seeds()[seed]
    c = _kind_case
    head = _head
    cases = [
        c(seed, "control", lambda f, w: f, "accepted"),
        c(seed, "float16", _tensors(_cast("float16")), "accepted"),
        c(seed, "bfloat16-head", _tensors(_cast("bfloat16", head))),
        c(seed, "int8-head", _tensors(_cast("int8", head)), "refused"),
        c(seed, "drop-head", _tensors(_drop(head)), "either"),
        c(seed, "drop-attn", _tensors(_drop(_attn_weight)), "either"),
        c(seed, "rename-attn", _tensors(_rename(_attn_weight)), "either"),
        c(seed, "reshape-attn-shorter", _tensors(_reshape(_attn_weight, "shorter")), "either"),
        c(seed, "reshape-head-transpose", _tensors(_reshape(head, "transpose")), "either"),
        c(seed, "reshape-attn-flat", _tensors(_reshape(_attn_weight, "flat")), "either"),
        c(seed, "nan-attn", _tensors(_poison(_attn_weight, NAN, True)), "refused"),
        c(seed, "inf-head-one", _tensors(_poison(head, float("inf"), False)), "either"),
        c(seed, "truncated-half", _truncate(0.5), "refused"),
        c(seed, "truncated-header", _truncate(0.001), "refused"),
        c(seed, "weights-missing", _remove("weights"), "refused"),
    ]
    if spec.weights:  # a folder: config.json
        cases += [
            c(seed, "config-not-json", _raw_config("{not json"), "refused"),
            c(seed, "config-a-list", _raw_config("[1, 2]"), "refused"),
            c(seed, "config-missing", _remove("config.json"), "either"),
        ]
    table = _table(seed)
    for variant, path, value, expect in table:
        cases.append(c(seed, variant, _config(_set(path, value)), expect))
    return [replace(case, ci=case.name in CI_CASES) for case in cases]


def _random(seed: str, rng: random.Random) -> list[Case]:
    """Seeded variants: a random tensor dropped/renamed/reshaped/poisoned/cast, a random cut, a
    random wrong config field."""
    k = rng.randrange(1 << 30)

    def pick(keys: list[str], k: int = k) -> str:
        floats = _float_keys(keys)
        return floats[k % len(floats)]

    how = rng.choice(["drop", "rename", "transpose", "shorter", "longer", "flat", "nan", "inf",
                      "float16", "int32"])  # fmt: skip
    change = {
        "drop": _drop(pick),
        "rename": _rename(pick),
        "transpose": _reshape(pick, "transpose"),
        "shorter": _reshape(pick, "shorter"),
        "longer": _reshape(pick, "longer"),
        "flat": _reshape(pick, "flat"),
        "nan": _poison(pick, NAN, rng.random() < 0.5),
        "inf": _poison(pick, float("inf"), False),
        "float16": _cast("float16", pick),
        "int32": _cast("int32", pick),
    }[how]
    fraction = rng.random()
    table = _table(seed)
    variant, path, _, _ = rng.choice(table)
    other = rng.choice([0, -1, 1, 3, BIG, 2.5, "x", None, [], {}, [3, 17, 17], True, float("inf")])
    return [
        _kind_case(seed, f"random-{how}-{k}", _tensors(change)),
        _kind_case(seed, f"random-cut-{fraction:.6f}", _truncate(fraction), "refused"),
        _kind_case(seed, f"random-{variant}-{json.dumps(other)}", _config(_set(path, other))),
    ]


SEED_NAMES = (
    "volo", "mobilevit-timm", "mobilevit-bare", "mobilevit-hf", "levit", "mvit-bare", "tnt",
    "crossvit", "convit", "pit", "sapiens2", "sapiens2-meta",
)  # fmt: skip


def kind_checkpoints(rng: random.Random, first: bool) -> list[Case]:
    """Round 0: every seed's fixed mutations and one random set; later rounds: a random set of
    two seeds."""
    names = list(SEED_NAMES) if first else rng.sample(list(SEED_NAMES), 2)
    cases: list[Case] = []
    for name in names:
        if first:
            cases += _fixed(name)
        cases += _random(name, rng)
    return cases


KIND_GENERATORS = [kind_checkpoints]
