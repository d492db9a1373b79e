"""timm ViT names fine-tuned with one setting the weights can't show, saved bare: each must open
exactly or be refused asking (never opened wrong), and the answer it asks for must be exact.

For a sample of the plain ViT names in vitviz's table of timm (those vitviz computes: no
refusal), each name is built by timm with one non-default setting (pooling, heads, activation,
image size, a non-square grid), every parameter perturbed (the tests' ``randomize_``), saved
with ``torch.save(model.state_dict())`` and opened with ``load_checkpoint`` and no settings:

    exact     opened, logits within 1e-4 (relative) and attention within 1e-5 of timm's
    asks      refused with the settings it needs named (MissingSettingsError)
    refused   refused for another reason (a part vitviz doesn't model, an ambiguous layout)
    WRONG     opened with other numbers (must be 0)

An "asks" is then answered with the true settings, in the vocabulary the message names
(``heads``, ``activation``, ``global_pool``, ``image_size``), and must be exact ("answer").
"asked only" answers just the settings asked, leaving the conventions the message lists as
assumed standing: "stated" when it then opens with other numbers (the setting changed was one
of those conventions, listed as ``assumed …`` in the notes), which the full answer corrects.

    python benchmarks/timm_bare_settings.py [--sample K --seed N] [--max-params M]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "tests"))  # zoo_helpers.randomize_: the tests' one perturbation

import timm  # noqa: E402
import torch  # noqa: E402
from timm_walk import opened_errors, param_count  # noqa: E402
from zoo_helpers import randomize_  # noqa: E402

from vitviz.checkpoints import CheckpointError, MissingSettingsError, load_checkpoint  # noqa: E402
from vitviz.checkpoints.families.timm_library import LIBRARY_MODEL  # noqa: E402
from vitviz.kinds.vit.families import timm_arch  # noqa: E402

LOGITS_RTOL, ATTENTION_ATOL = 1e-4, 1e-5
SETTINGS = ("pooling", "heads", "activation", "image size", "grid shape")


def plain_names() -> list[str]:
    """The table's timm VisionTransformer names vitviz computes (no refusal, no MAP head)."""
    archs = timm_arch.table()["archs"]
    return sorted(
        name
        for name, e in archs.items()
        if e["refusal"] is None
        and e["settings"].get("global_pool") in ("token", "avg")
        and not e["settings"].get("rel_pos_bias")
        and "stem" not in e["settings"]
    )


def variant(name: str, setting: str) -> tuple[dict, dict] | None:
    """(timm keywords that make ``setting`` non-default for ``name``, the answer in vitviz's
    vocabulary); None when the setting can't differ for it."""
    rec = timm_arch.table()["archs"][name]["settings"]
    meta = _meta(name)
    dim, p = int(meta.embed_dim), int(meta.patch_embed.patch_size[0])
    if setting == "pooling":
        pool = "avg" if rec["global_pool"] == "token" else "token"
        if pool == "token" and not rec["class_token"]:
            return None
        return {"global_pool": pool, "fc_norm": rec["fc_norm"]}, {"global_pool": pool}
    if setting == "heads":
        heads = next((h for h in (rec["heads"] * 2, rec["heads"] // 2) if h and dim % h == 0), 0)
        if rec.get("attn_head_dim") or not heads:
            return None
        return {"num_heads": heads}, {"heads": heads}
    if setting == "activation":
        act = "gelu_tanh" if rec["activation"] != "gelu_tanh" else "gelu"
        return {"act_layer": act}, {"activation": act}
    size = [3 * p, 3 * p] if setting == "image size" else [2 * p, 3 * p]
    return {"img_size": tuple(size)}, {"image_size": size}


def _meta(name: str) -> torch.nn.Module:
    """timm's ``name`` on the meta device (its sizes, no memory)."""
    with torch.device("meta"):
        return timm.create_model(name, pretrained=False)


def answer_for(rec: dict, given: dict, options: dict, model: torch.nn.Module) -> dict:
    """The true settings in vitviz's words: what was changed, and what the name had (a user who
    trained it knows both)."""
    h, w = model.patch_embed.img_size
    true = {
        "heads": options.get("num_heads", rec["heads"]),
        "activation": options.get("act_layer", rec["activation"]),
        "global_pool": options.get("global_pool", rec["global_pool"]),
        "image_size": [int(h), int(w)],
    }
    return {**true, **given}


def one(name: str, setting: str, folder: Path, seed: int) -> tuple[str, str, str, str]:
    """(first verdict, answer verdict, asked-only verdict, detail) of ``name`` with
    ``setting`` non-default."""
    made = variant(name, setting)
    if made is None:
        return "n/a", "", "", "the setting can't differ for this name"
    options, given = made
    p = int(_meta(name).patch_embed.patch_size[0])
    kwargs = {"img_size": 2 * p, "num_classes": 5, **options}
    torch.manual_seed(seed)
    try:
        model = timm.create_model(name, pretrained=False, **kwargs).eval()
    except Exception as exc:  # noqa: BLE001 - a combination timm refuses
        return "n/a", "", "", f"timm can't build it ({type(exc).__name__})"
    model = randomize_(model, seed=seed, noise_dtype=torch.float32)
    h, w = model.patch_embed.img_size
    x = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():  # timm's own forward, its fused attention (the reading turns it off)
        default_logits = model(x)
    ref_logits, ref_attn = LIBRARY_MODEL.read(model, x)  # the ViT's: timm's explicit path
    refs = (ref_logits, ref_attn or [], default_logits)  # each vitviz path against timm's same
    path = folder / f"{name}-{setting.replace(' ', '_')}.pth"
    torch.save(model.state_dict(), path)
    first, detail = _open(path, None, x, refs)
    if first != "asks":
        return first, "", "", detail
    rec = timm_arch.table()["archs"][name]["settings"]
    answer = answer_for(rec, given, options, model)
    second, detail2 = _open(path, answer, x, refs)
    if second == "refused" and "if it is a plain ViT without rotary positions" in detail2:
        answer.update(rope="none", norm_eps=rec["norm_eps"])  # the advice that refusal gives
        second, detail2 = _open(path, answer, x, refs)
    asked = {k: answer[k] for k in detail.split(", ") if k in answer}
    third, _ = _open(path, asked, x, refs)
    third = "stated" if third == "WRONG" and _stated(path, asked, setting) else third
    return first, second, third, detail2 if second != "exact" else detail


WORDS = {"pooling": "global_pool", "heads": "heads", "image size": "image_size"}


def _stated(path: Path, settings: dict, setting: str) -> bool:
    """Whether opening with ``settings`` lists the changed setting as assumed."""
    key = WORDS.get(setting, setting)
    notes = load_checkpoint(path, settings).notes
    words = {"global_pool": ("pooling",), "image_size": ("image_size",), "heads": ("heads",)}
    return any(
        n.startswith("assumed") and any(w in n for w in words.get(key, (key,))) for n in notes
    )


def _open(path: Path, settings: dict | None, x, refs: tuple) -> tuple[str, str]:
    """``refs``: timm's explicit logits and attention, and its own (fused) forward's logits."""
    try:
        loaded = load_checkpoint(path, settings)
    except MissingSettingsError as exc:
        return "asks", ", ".join(exc.fields)
    except CheckpointError as exc:
        return "refused", str(exc).split(": ", 1)[-1]
    ref_logits, ref_attn, default_logits = refs
    rel, att = opened_errors(loaded, x, ref_logits, ref_attn, True, default_logits)
    wrong = rel > LOGITS_RTOL or (att is not None and att > ATTENTION_ATOL)
    return ("WRONG" if wrong else "exact"), f"logits {rel:.1e}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=8, help="names to try (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-params", type=float, default=30e6)
    args = parser.parse_args(argv)
    names = [n for n in plain_names() if 0 < param_count(n) <= args.max_params]
    if args.sample:
        names = sorted(random.Random(args.seed).sample(names, min(args.sample, len(names))))
    counts: dict[str, Counter] = {s: Counter() for s in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for setting in SETTINGS:
                first, second, third, detail = one(name, setting, Path(tmp), seed=len(name))
                counts[setting][first] += 1
                if second:
                    counts[setting][f"answer {second}"] += 1
                    counts[setting][f"asked only {third}"] += 1
                print(
                    f"{name:44s} {setting:11s} {first:8s} {second or '-':8s} {third or '-':8s} "
                    f"{detail[:90]}"
                )
                for f in Path(tmp).iterdir():
                    f.unlink()
    print()
    cols = ("exact", "asks", "refused", "WRONG", "answer exact", "answer WRONG",
            "asked only exact", "asked only stated", "asked only WRONG", "n/a")  # fmt: skip
    print("| setting | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for setting in SETTINGS:
        print(f"| {setting} | " + " | ".join(str(counts[setting][c]) for c in cols) + " |")
    wrong = sum(c["WRONG"] + c["answer WRONG"] + c["asked only WRONG"] for c in counts.values())
    print(f"\nOPEN-AND-WRONG: {wrong} (seed {args.seed}, {len(names)} names)")
    return 1 if wrong else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
