"""Model ids through a stand-in hub on 127.0.0.1 (``tests/hub_standin.py``): what a download
fetches, and what a cached id costs to open.

1. **Bytes.** Three repositories shaped as the hub holds the curated models, each downloaded
   by id into an empty cache: a timm ViT (``config.json``, ``model.safetensors`` and
   ``pytorch_model.bin``, README), a transformers DINO ViT (its processor's settings, the
   weights as safetensors, .bin, TensorFlow and Flax, an ONNX export), a transformers CLIP
   (its processor, its tokenizer as ``vocab.json`` + ``merges.txt`` and the tokenizer's other
   files, the weights twice). The table gives the files vitviz chose, the bytes the stand-in
   served and the repository's total. Wrong result: served bytes other than the chosen files'.
2. **Time.** ``load_checkpoint(id)`` of a cached id (no request) against
   ``load_checkpoint(folder)`` of a plain folder with the same files, interleaved medians.
   Target: ratio ≤ 1.10 (the same, within noise). Wrong result: a request during a cached open,
   or logits that differ.

    .venv/bin/python benchmarks/hub_download.py [--quick] [--no-check] [--repeats N]
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from _common import (
    REPO_ROOT,
    Check,
    Stats,
    finish,
    fmt_seconds,
    interleaved,
    parser,
    print_timed_report,
)

sys.path.insert(0, str(REPO_ROOT / "tests"))
from hub_standin import StandinHub, StandinRepo

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _folder_files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def timm_repo(quick: bool) -> dict[str, bytes]:
    import timm
    from timm.models import save_for_hf

    size = dict(depth=2, embed_dim=64, num_heads=2) if quick else {}
    model = timm.create_model("vit_small_patch16_224", num_classes=1000, **size)
    with tempfile.TemporaryDirectory() as tmp:
        save_for_hf(model, tmp, safe_serialization="both")
        files = _folder_files(Path(tmp))
    return files | {"README.md": b"---\nlicense: apache-2.0\n---\n# ViT\n", ".gitattributes": b"*"}


def dino_repo(quick: bool) -> dict[str, bytes]:
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    tiny = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
    small = dict(  # ViT-S/16
        hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536
    )
    config = ViTConfig(**(tiny if quick else small), image_size=224, patch_size=16)
    model = ViTModel(config)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        ViTImageProcessor().save_pretrained(tmp)
        files = _folder_files(Path(tmp))
    weights = files["model.safetensors"]
    bin_file = io.BytesIO()
    torch.save(model.state_dict(), bin_file)
    return files | {
        "pytorch_model.bin": bin_file.getvalue(),
        "tf_model.h5": b"\x89HDF" + bytes(len(weights)),
        "flax_model.msgpack": bytes(len(weights)),
        "onnx/model.onnx": bytes(len(weights)),
        "README.md": b"# DINO\n",
    }


def clip_repo(quick: bool) -> dict[str, bytes]:
    from clip_fixtures import CORPUS, hf_tokenizer, learn_bpe, tiny_clip
    from transformers import CLIPImageProcessor

    vocab, merges = learn_bpe(CORPUS, 200)
    model = tiny_clip(len(vocab))
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        hf_tokenizer(vocab, merges).save_pretrained(tmp)
        CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=32).save_pretrained(tmp)
        files = _folder_files(Path(tmp))
    bin_file = io.BytesIO()
    torch.save(model.state_dict(), bin_file)
    return files | {"pytorch_model.bin": bin_file.getvalue(), "README.md": b"# CLIP\n"}


def main() -> int:
    p = parser("Model ids through a stand-in hub: bytes fetched, cached open vs folder open.")
    args = p.parse_args()
    repeats = args.repeats or (3 if args.quick else 9)
    from vitviz.checkpoints import load_checkpoint

    repos = {
        "timm/vit_small_patch16_224.augreg_in21k_ft_in1k": timm_repo(args.quick),
        "facebook/dino-vits16": dino_repo(args.quick),
        "openai/clip-vit-base-patch32": clip_repo(args.quick),
    }
    wrong: list[str] = []
    rows = []
    work = Path(tempfile.mkdtemp(prefix="vitviz-hub-bench-"))
    os.environ.update(HF_HOME=str(work / "hf"))
    for name in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN"):
        os.environ.pop(name, None)
    standin = [StandinRepo(r, files, COMMIT) for r, files in repos.items()]
    try:
        with StandinHub(standin, lifetime=1800) as hub:
            os.environ["HF_ENDPOINT"] = hub.url
            for repo_id, files in repos.items():
                loaded = load_checkpoint(repo_id)
                chosen = sorted(p.name for p in loaded.path.iterdir())
                served = hub.bytes_served(repo_id)
                needed = sum(len(files[n]) for n in chosen)
                if served != needed or hub.files_served(repo_id) != set(chosen):
                    wrong.append(f"{repo_id}: served {served} B for files worth {needed} B")
                total = sum(len(b) for b in files.values())
                rows.append(
                    (
                        repo_id,
                        ", ".join(chosen),
                        f"{served:,}",
                        f"{total:,}",
                        f"{served / total:.0%}",
                    )
                )
            asked = len(hub.requests)
            repo_id = "timm/vit_small_patch16_224.augreg_in21k_ft_in1k"
            folder = work / "plain"
            folder.mkdir()
            for f in load_checkpoint(repo_id).path.iterdir():
                shutil.copyfile(f, folder / f.name)
            x = torch.randn(1, 3, 224, 224)
            with torch.no_grad():
                a = load_checkpoint(repo_id).model(x)
                b = load_checkpoint(folder).model(x)
            if not torch.equal(a, b):
                wrong.append("a cached id and its folder give different logits")
            times = interleaved(
                {
                    "folder": lambda: load_checkpoint(folder),
                    "cached id": lambda: load_checkpoint(repo_id),
                },
                repeats=repeats,
                warmup=1,
            )
            if len(hub.requests) != asked:
                wrong.append(f"{len(hub.requests) - asked} requests while opening a cached id")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("# Model ids through a stand-in hub")
    print()
    from _common import print_table

    print_table(("repository", "files vitviz fetched", "bytes served", "repo bytes", "share"), rows)
    print()
    folder_t, cached_t = Stats.of(times["folder"]), Stats.of(times["cached id"])
    ratio = cached_t.median / folder_t.median
    print_timed_report(
        f"Opening {repo_id}: cached id vs a folder of the same files",
        ("case", "median", "p90", "ratio"),
        [
            (
                "load_checkpoint(folder)",
                fmt_seconds(folder_t.median),
                fmt_seconds(folder_t.p90),
                "1.00",
            ),
            (
                "load_checkpoint(id), cached",
                fmt_seconds(cached_t.median),
                fmt_seconds(cached_t.p90),
                f"{ratio:.2f}",
            ),
        ],
        repeats,
        1,
        args.quick,
    )
    checks = [] if args.quick else [Check("cached id / folder", ratio, 1.10, at_most=True)]
    return finish(checks, args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
