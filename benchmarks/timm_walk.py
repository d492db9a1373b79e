"""Walk timm's ViT-family architectures: each one exact, refused (by reason), never opened wrong.

Every name matching the patterns is built by timm with random weights (every parameter
perturbed, seeded, at its own scale; a name whose own logits overflow at that, at each layer's
fan-in) at the smallest image size it takes, saved as a user has it
(a bare ``state_dict`` with ``torch.save``; timm's folder, config.json + model.safetensors, by
``save_for_hf``), opened with ``load_checkpoint`` and compared with timm's eager forward:
logits within 1e-4 (relative), attention within 1e-5. Prints one line per name and form, then
the table: exact / refused by reason / OPEN-AND-WRONG (which must be 0).

    python benchmarks/timm_walk.py [--budget S] [--sample K --seed N] [--max-params M]
        [--transformers] [--shard I/N --tsv PATH]   # one of N processes, verdicts to PATH
    python benchmarks/timm_walk.py --tally PATH...  # the table of several shards' TSVs
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tests"))  # zoo_helpers.randomize_: the tests' one perturbation

import timm  # noqa: E402
import torch  # noqa: E402
from timm.models import save_for_hf  # noqa: E402
from zoo_helpers import randomize_, randomize_stem_  # noqa: E402

from vitviz.checkpoints import CheckpointError, load_checkpoint  # noqa: E402
from vitviz.checkpoints.families import timm_library  # noqa: E402
from vitviz.kinds.pyramid.families.timm_hiera import mask_unit_probabilities  # noqa: E402
from vitviz.kinds.vit.families import huggingface as vit_hf  # noqa: E402

PATTERNS = (
    "vit_*",
    "deit*",
    "eva*",
    "beit*",
    "swin*",
    "cait*",
    "xcit*",
    "flexivit*",
    "samvit*",
    "pit_*",
    "levit*",
    "twins*",
    "pvt*",
    "mvitv2*",
    "hiera*",
    "convit*",
    "crossvit*",
    "tnt_*",
    "volo*",
)
LOGITS_RTOL, ATTENTION_ATOL = 1e-4, 1e-5
FLOAT64_RTOL = 1e-9  # a float64 reading this close is the same function
# off by more than 1e-4 in float32 but the same function in float64 (float32's rounding in
# another order): its own row of the table, apart from "exact" and from OPEN-AND-WRONG
EXACT_IN_FLOAT64 = "exact-float64"
# A refusal message -> its reason, most specific first.
REASONS = (
    (r"has (.+?), which vitviz does not model", None),
    (r"this is (.+?), which vitviz does not model", None),
    (r"compute differently", "bare: several timm architectures fit (needs --arch)"),
    (r"don't say", "bare: asks for settings the weights lack"),
    (r"can't express", "tensors vitviz's model has no place for"),
    (r"does not recognise this layout", "layout not recognised"),
    (r"differs from (timm|transformers)", "the library's own check differs"),
    (r"model_type '[^']+' is not supported", "transformers model_type not supported"),
    (r"looks like a Hugging Face Swin, but", "transformers Swin variant with other tensors"),
)


def reason_of(message: str) -> str:
    for pattern, label in REASONS:
        m = re.search(pattern, message)
        if m:
            return label or m.group(1)
    return message.split(": ", 1)[-1][:70]


def sizes_to_try(name: str) -> list[int | None]:
    """Small square sizes first, then timm's own default (None)."""
    m = re.search(r"patch(\d+)", name)
    p = int(m.group(1)) if m else 16
    return [2 * p, 4 * p, 64, 96, 128, None]


def build(name: str, seed: int) -> tuple[torch.nn.Module, torch.Tensor] | None:
    """timm's model at the smallest size that builds and runs, randomised; None if none does."""
    for side in sizes_to_try(name):
        try:
            torch.manual_seed(seed)
            sized = {} if side is None else {"img_size": side}
            model = timm.create_model(name, pretrained=False, num_classes=5, **sized)
            model.eval()
            shape = (3, side, side) if side is not None else model.pretrained_cfg["input_size"]
            x = torch.randn(1, *shape, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                model(x)
        except Exception:  # noqa: BLE001 - a size (or name) timm refuses: try the next
            continue
        model = randomize_(model, seed=seed, noise_dtype=torch.float32)
        model = randomize_stem_(model, seed)  # a hybrid's ResNet at its own scale
        if not finite_logits(model, x):  # overflows at 0.2 (a wide LeViT's Linear + BatchNorm)
            model = randomize_at_fan_in_(model, seed)
        return model, x
    return None


def finite_logits(model: torch.nn.Module, x: torch.Tensor) -> bool:
    with torch.no_grad():
        return bool(model(x).isfinite().all())


def randomize_at_fan_in_(model: torch.nn.Module, seed: int, scale: float = 0.2) -> torch.nn.Module:
    """Every parameter random at its layer's own scale, for a name whose logits ``randomize_``'s
    one scale overflows (LeViT from width 256: every Linear is followed by a BatchNorm whose
    weight ``randomize_`` puts around 0, so nothing holds the product of 0.2-wide weights over
    hundreds of inputs): Linear and conv weights ~ N(0, 1/fan_in), norm weights around 1, the
    rest (biases, attention biases, tokens) ``scale`` wide; BatchNorm's running statistics random
    too, so its eval computation is compared. The names ``randomize_`` keeps finite keep their
    weights (the walk's results for them stay as they were)."""
    norms = (torch.nn.modules.batchnorm._NormBase, torch.nn.LayerNorm, torch.nn.GroupNorm)
    g = torch.Generator().manual_seed(200 + seed)
    with torch.no_grad():
        for module in model.modules():
            for leaf, p in module.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=g).to(p.dtype)
                if isinstance(module, norms) and leaf == "weight":
                    p.copy_(1 + scale * noise)
                elif leaf == "weight" and p.ndim >= 2:
                    p.copy_(noise / p[0].numel() ** 0.5)
                else:
                    p.copy_(scale * noise)
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                mean, var = module.running_mean, module.running_var
                mean.copy_(0.3 * torch.randn(mean.shape, generator=g))
                var.copy_(0.5 + torch.rand(var.shape, generator=g))
    return model.eval()  # eval() also drops the attention biases timm's LeViT cached


def opened_errors(
    loaded,
    x: torch.Tensor,
    ref_logits,
    ref_attn,
    classifier: bool = True,
    default_logits: torch.Tensor | None = None,
) -> tuple[float, float | None]:
    """(logits max relative error, attention max error or None when not comparable). Each of
    vitviz's paths is compared with the library's same path: its capture path with the
    library's explicit one (``ref_logits``, ``ref_attn``), its fused path with the library's
    own default forward (``default_logits``, its fused attention where it has one; None: the
    explicit one). The two orders of float32 rounding part by more than 1e-4 on a network that
    amplifies them (an EVA-02 with tokens of size 400), in the library as in vitviz. A base
    model (``classifier`` False) whose classes are typed prompts and that has none yet (a CLIP
    image tower) gives no logits: its attention alone is compared. A classifier's logits are
    always compared: a head dropped is wrong."""
    from vitviz.kindapi import kind_of

    scale = max(float(ref_logits.abs().max()), 1e-12)
    fused_ref = ref_logits if default_logits is None else default_logits
    with torch.no_grad():
        logits = loaded.model(x)
        no_head = not classifier and logits.shape[-1] == 0 and ref_logits.shape[-1] != 0
        if no_head:
            rel = 0.0
        elif logits.shape != fused_ref.shape:
            rel = float("inf")
        else:
            rel = float((logits.double() - fused_ref.double()).abs().max()) / scale
        explained, ours = kind_of(loaded).library_outputs(loaded.model, x)
    if not no_head and explained.shape == ref_logits.shape:  # the capture path's logits too
        rel = max(rel, float((explained.double() - ref_logits.double()).abs().max()) / scale)
    if ours is None:  # the kind's maps aren't the library's (a Swin's windows): logits only
        return rel, None
    if len(ours) != len(ref_attn) or any(
        a.shape != b.shape for a, b in zip(ours, ref_attn, strict=True)
    ):
        return rel, float("inf") if ref_attn else None
    return rel, max(
        (float((a - b).abs().max()) for a, b in zip(ours, ref_attn, strict=True)), default=None
    )


def walk_one(name: str, folder: Path, seed: int) -> list[tuple[str, str, str]]:
    """[(form, verdict, detail)] for the bare and folder forms of ``name``."""
    built = build(name, seed)
    if built is None:
        return [("both", "not built", "timm can't build it at a small size here")]
    model, x = built
    with torch.no_grad():  # timm's own forward, its fused attention (the reading turns it off)
        default_logits = model(x)
    if not default_logits.isfinite().all():  # nothing to compare with (NaN would pass as exact)
        return [("both", "not built", "timm's own logits are not finite on these weights")]
    bare = folder / f"{name}.pth"
    torch.save(model.state_dict(), bare)
    save_for_hf(model, folder / name, safe_serialization=True)
    rows = []
    for form, path in (("bare", bare), ("folder", folder / name)):
        theirs = (model, ANY_TIMM)
        rows.append((form, *verdict(path, x, theirs, True, default_logits)))
    return rows


def _every_block(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every attention block a timm model has, in vitviz's order: its ``blocks`` (one list per
    stage or not), else its stages' blocks, then its class-attention blocks."""
    blocks = getattr(model, "blocks", None)
    if blocks is not None:
        nested = torch.nn.ModuleList
        found = [b for x in blocks for b in (x if isinstance(x, nested) else [x])]
    else:
        found = [b for st in getattr(model, "stages", []) for b in getattr(st, "blocks", [])]
    for name in ("blocks_token_only", "cls_attn_blocks"):
        found += list(getattr(model, name, None) or [])
    return found


def _any_probabilities(block: torch.nn.Module, out: list) -> object:
    """A block's probabilities as its family reads them: within mask units, or its dropout's."""
    if hasattr(getattr(block, "attn", None), "use_mask_unit_attn"):
        return mask_unit_probabilities(block, out)
    return timm_library.after_dropout(block, out)


# the walk's reading of a timm file opened without a library reference: every block it has
ANY_TIMM = timm_library.timm_reference(_every_block, _any_probabilities)


def library_reading(loaded, theirs: tuple, x: torch.Tensor) -> tuple:
    """The library model's explicit logits and attention (a list), read as the family that
    opened the file reads them (its reference's ``how``: CaiT's class-attention blocks, Hiera's
    mask units, ...); ``theirs``: (the library's model, the reading of a file opened with no
    reference)."""
    model, fallback = theirs
    how = loaded.reference.how if loaded.reference is not None else fallback
    logits, attention = how.read(model, x)
    return logits, attention or []


def verdict(
    path: Path,
    x: torch.Tensor,
    theirs: tuple,
    classifier: bool = True,
    default_logits: torch.Tensor | None = None,
) -> tuple[str, str]:
    """(refused | exact | OPEN-AND-WRONG, the reason or the errors) of opening ``path``;
    ``theirs``: the library's model and its fallback reading (``library_reading``);
    ``default_logits``: the library's own forward, which vitviz's fused path is compared with."""
    try:
        loaded = load_checkpoint(path)
    except CheckpointError as exc:
        return "refused", reason_of(str(exc))
    ref_logits, ref_attn = library_reading(loaded, theirs, x)
    try:
        rel, att = opened_errors(loaded, x, ref_logits, ref_attn, classifier, default_logits)
    except ValueError as exc:  # it opened, and refuses this input (Twins-SVT: not whole windows)
        return "refused", f"input: {reason_of(str(exc))}"
    wrong = rel > LOGITS_RTOL or (att is not None and att > ATTENTION_ATOL)
    att_text = "—" if att is None else f"{att:.1e}"
    if wrong and (att is None or att <= ATTENTION_ATOL):  # float32's rounding, or the model?
        drift = float64_error(loaded.model, theirs[0], x)
        if drift is not None and drift <= FLOAT64_RTOL:
            return EXACT_IN_FLOAT64, f"{rel:.1e} / {att_text}; float64 {drift:.0e}"
    return "OPEN-AND-WRONG" if wrong else "exact", f"{rel:.1e} / {att_text}"


def float64_error(ours: torch.nn.Module, library: torch.nn.Module, x: torch.Tensor) -> float | None:
    """Max relative logits error of copies of both models computed in float64 (a deep network
    with perturbed weights parts float32's two orders of rounding by more than 1e-4, as the
    method tests hold their references in float64); None where a model won't run in float64."""
    import copy

    try:
        with torch.no_grad():
            theirs = copy.deepcopy(library).double()(x.double())
            mine = copy.deepcopy(ours).double()(x.double())
    except Exception:  # noqa: BLE001 - no float64 path: the float32 verdict stands
        return None
    if mine.shape != theirs.shape:
        return None
    return float((mine - theirs).abs().max()) / max(float(theirs.abs().max()), 1e-300)


def param_count(name: str) -> float:
    """Parameters of timm's ``name`` at its defaults (a meta-device build); 0 if it won't build."""
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False)
    except Exception:  # noqa: BLE001 - counted as not built by the walk
        return 0
    return float(sum(p.numel() for p in model.parameters()))


HF_TYPES = (
    "vit",
    "deit",
    "dinov2",
    "dinov2_with_registers",
    "dinov3_vit",
    "beit",
    "data2vec-vision",
    "vit_msn",
    "vit_mae",
    "ijepa",
    "swin",
    "swinv2",
    "donut-swin",
    "hiera",
    "pvt",
    "pvt_v2",
    "levit",
    "cvt",
    "mobilevit",
    "siglip_vision_model",
    "clip_vision_model",
    "siglip",  # SiglipForImageClassification: a tower with a classifier
    "clip",  # CLIPForImageClassification
)
HF_TINY = dict(
    image_size=32,
    patch_size=8,
    hidden_size=48,
    num_hidden_layers=2,
    num_attention_heads=3,
    intermediate_size=96,
    num_labels=4,
)


# what a model type needs beyond the tiny sizes to be the model vitviz shows (ViT-MAE's encoder
# without its pre-training's random masking)
HF_EXTRA = {
    "vit_mae": {"mask_ratio": 0.0},
    # LeViT's stem is 16 px whatever patch_size says, and its defaults' full size overflows under
    # the walk's perturbation (NaN logits): a tiny one, its subsamples as its config derives them
    "levit": {
        "image_size": 64,
        "patch_size": 16,
        "hidden_sizes": [16, 24, 32],
        "key_dim": [4, 4, 4],
        "num_attention_heads": [2, 3, 4],
        "depths": [1, 2, 1],
        "down_ops": [["Subsample", 4, 4, 4, 2, 2], ["Subsample", 4, 6, 4, 2, 2]],
    },
}
# a model type of two towers: its classifier alone (its base model needs text), tiny towers
_TOWER = {k: v for k, v in HF_TINY.items() if k != "num_labels"}
_TEXT = dict(hidden_size=48, num_hidden_layers=1, num_attention_heads=3, intermediate_size=96)
HF_TWO_TOWERS = {"siglip", "clip"}
HF_TWO_TOWER_SIZES = {"vision_config": _TOWER, "text_config": _TEXT, "num_labels": 4}


def hf_classes(model_type: str) -> list[tuple[str, type]]:
    """[(form, class)]: transformers' image classifier of ``model_type`` ("hf-cls") where it
    has one, and its base model ("hf-base")."""
    import transformers as tr
    from transformers.models.auto import modeling_auto as auto

    found = []
    for form, names in (
        ("hf-cls", auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES),
        ("hf-base", auto.MODEL_MAPPING_NAMES),
    ):
        if form == "hf-base" and model_type in HF_TWO_TOWERS:
            continue
        name = names.get(model_type)
        name = name[0] if isinstance(name, (list, tuple)) else name
        cls = getattr(tr, name, None) if name else None
        if cls is not None:
            found.append((form, cls))
    return found


def hf_model(model_type: str, cls: type, seed: int) -> tuple[torch.nn.Module, torch.Tensor] | None:
    """``cls`` of ``model_type``, tiny where the config takes the tiny sizes, else at its
    defaults; randomised. None if it won't build."""
    import transformers as tr

    if model_type not in tr.CONFIG_MAPPING:  # a lazy mapping: no .get
        return None
    config_cls = tr.CONFIG_MAPPING[model_type]
    extra = HF_EXTRA.get(model_type, {})
    tiny = HF_TWO_TOWER_SIZES if model_type in HF_TWO_TOWERS else HF_TINY
    for overrides in ({**tiny, **extra}, {"num_labels": 4, **extra}):
        try:
            config = config_cls(**overrides)
            torch.manual_seed(seed)
            model = cls._from_config(config, attn_implementation="eager").eval()
            size = getattr(getattr(config, "vision_config", config), "image_size", None)
            side = size if isinstance(size, int) else 224
            x = torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                model(pixel_values=x)
        except Exception:  # noqa: BLE001 - sizes this type won't take: its defaults next
            continue
        model = randomize_(model, seed=seed, noise_dtype=torch.float32)
        return _without_stale_caches(model), x
    return None


def _without_stale_caches(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with the attention biases it cached in its size test forgotten: transformers'
    LeViT keeps the biases indexed in eval mode and clears them only when set to train, so after
    the perturbation its own forward would still add the old ones (its saved folder has the
    new)."""
    for module in model.modules():
        cache = getattr(module, "attention_bias_cache", None)
        if isinstance(cache, dict):
            cache.clear()
    return model


def walk_hf(model_type: str, folder: Path, seed: int) -> list[tuple[str, str, str]]:
    """[(form, verdict, detail)] of ``model_type``'s ``save_pretrained`` folders."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    rows = []
    for form, cls in hf_classes(model_type) or [("hf", None)]:
        built = hf_model(model_type, cls, seed) if cls is not None else None
        if built is None:
            rows.append((form, "not built", "transformers can't build it here"))
            continue
        model, x = built
        model.save_pretrained(folder / form, safe_serialization=True)
        is_classifier = form == "hf-cls"
        theirs = (model, vit_hf.LIBRARY_MODEL)
        rows.append((form, *verdict(folder / form, x, theirs, is_classifier)))
    return rows


def names_to_walk(
    patterns: list[str], max_params: float, sample: int, seed: int
) -> tuple[list[str], int]:
    """(names to walk, how many were over ``max_params``): every name, or ``sample`` of them
    drawn with ``seed`` among those under the limit."""
    names = sorted({n for p in patterns for n in timm.list_models(p)})
    if sample:
        random.Random(seed).shuffle(names)
    keep, big = [], 0
    for name in names:
        if sample and len(keep) == sample:
            break
        if param_count(name) <= max_params:
            keep.append(name)
        else:
            big += 1
    return sorted(keep), big


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", nargs="+", default=list(PATTERNS))
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds; stops after")
    parser.add_argument("--max-params", type=float, default=100e6, help="skip bigger models")
    parser.add_argument("--sample", type=int, default=0, help="walk K random names only")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--transformers", action="store_true", help="walk transformers' vision model types too"
    )
    parser.add_argument("--shard", default="0/1", help="I/N: walk every N-th name from the I-th")
    parser.add_argument("--tsv", type=Path, help="also write name, form, verdict, detail here")
    parser.add_argument("--tally", type=Path, nargs="+", help="print the table of these TSVs")
    args = parser.parse_args(argv)
    if args.tally:
        return tally(args.tally)
    seed = args.seed if args.seed is not None else random.randrange(10_000)
    names, big = names_to_walk(args.patterns, args.max_params, args.sample, seed)
    index, count = (int(part) for part in args.shard.split("/"))
    names = names[index::count]
    tsv = args.tsv.open("w", encoding="utf-8") if args.tsv else None
    print(f"timm {timm.__version__}, seed {seed}, {len(names)} names ({big} over the size limit)")
    start = time.perf_counter()
    verdicts: Counter[str] = Counter()
    walked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if time.perf_counter() - start > args.budget:
                break
            folder = Path(tmp) / name
            folder.mkdir()
            for form, verdict, detail in walk_one(name, folder, seed):
                print(f"{name:48s} {form:6s} {verdict:15s} {detail}", flush=True)
                _row(tsv, name, form, verdict, detail)
                key = verdict if verdict != "refused" else f"refused: {detail}"
                verdicts[f"{form:7s} {key}"] += 1
            walked += 1
            for f in folder.rglob("*"):
                if f.is_file():
                    f.unlink()
        for model_type in HF_TYPES[index::count] if args.transformers else ():
            folder = Path(tmp) / f"hf-{model_type}"
            folder.mkdir()
            for form, verdict, detail in walk_hf(model_type, folder, seed):
                print(f"{'transformers ' + model_type:48s} {form:7s} {verdict:15s} {detail}")
                _row(tsv, f"transformers {model_type}", form, verdict, detail)
                key = verdict if verdict != "refused" else f"refused: {detail}"
                verdicts[f"{form:7s} {key}"] += 1
    took = time.perf_counter() - start
    if tsv is not None:
        tsv.close()
    print(f"\nwalked {walked} of {len(names)} names in {took:.0f} s")
    return print_table(verdicts)


def _row(tsv, name: str, form: str, verdict: str, detail: str) -> None:
    if tsv is not None:
        clean = " ".join(str(detail).split())
        tsv.write(f"{name}\t{form.strip()}\t{verdict.strip()}\t{clean}\n")
        tsv.flush()


def print_table(verdicts: Counter[str]) -> int:
    """The table of verdicts (form, verdict, count) and the OPEN-AND-WRONG line; 1 if any."""
    print(f"| {'form':7s} | {'verdict':70s} | {'count':>5s} |")
    for key, count in sorted(verdicts.items()):
        form, verdict = key.split(" ", 1)
        print(f"| {form:7s} | {verdict.strip()[:70]:70s} | {count:5d} |")
    wrong = sum(c for k, c in verdicts.items() if "OPEN-AND-WRONG" in k)
    print(f"OPEN-AND-WRONG: {wrong}")
    return 1 if wrong else 0


def tally(paths: list[Path]) -> int:
    """The table of several shards' TSVs (each name counted once per form)."""
    verdicts: Counter[str] = Counter()
    seen: set[tuple[str, str]] = set()
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            name, form, verdict, detail = [*line.split("\t"), "", "", ""][:4]
            if (name, form) in seen:
                continue
            seen.add((name, form))
            key = verdict if verdict != "refused" else f"refused: {detail}"
            verdicts[f"{form:7s} {key}"] += 1
    names = {name for name, _ in seen}
    print(f"{len(names)} names in {len(paths)} files")
    return print_table(verdicts)


if __name__ == "__main__":
    raise SystemExit(main())
