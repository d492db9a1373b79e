"""What looking inside a CLIP costs: the analysis of an image against typed prompts, against the
bare towers. ViT-B/32-sized towers (image 224 in 32-px patches, 12 × 768; text 12 × 512, 77
tokens) with random weights, on the CPU (or ``--device``), batch 1, measured in turns:
  (a) baseline: the image tower's fused forward with its prompt head (``model(x)`` under
      ``inference_mode``) plus one text-tower pass over the prompts;
  (a') the image tower's fused forward alone;
  (b) the prompts set (their text pass; the text cache emptied first) + ``analyze`` + rollout
      + every layer's CLS maps;
  (c) a new prompt typed: its text pass + its relevance map: the shown image's analysis (its
      forward pass's graph kept, ``vitviz.kinds.vit.kept_graph``) scored anew (``rescore``) and
      one backward pass from the new prompt's score through the kept graph;
  (c0) the same as it was done before the graph was kept (info): the analysis made again with
      gradients for the new prompts (a forward pass with autograd and a backward pass);
  (r) a rescore: the shown image's kept embedding scored against the prompts set (their text
      embeddings cached), no tower pass;
  (d) a new prompt in the window: its text pass, the kept image embedding scored
      (``rescore``) and the numbers the window draws (``image_numbers``), no image-tower pass.
Targets: median(b) / median(a) ≤ 1.15; median(c) / median(a') ≤ 1.5; median(r) / median(a')
≤ 0.3; median(d) ≤ 300 ms.
The prompts are tokenised byte by byte (no merges: each character one token), longer than
CLIP's BPE gives, so the text pass measured is if anything dearer.

    .venv/bin/python benchmarks/clip.py [--quick] [--no-check] [--repeats N] [--device cpu|cuda]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count

import torch
from _common import (
    Check,
    Stats,
    add_device_option,
    bench_device,
    device_name,
    finish,
    interleaved,
    parser,
    peak_rss_mib,
    print_timed_report,
    read_args,
    repeats_and_warmup,
    synced,
    target_cells,
    timing_cells,
)

from vitviz.blocks import ViTConfig
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.checkpoints.native import default_preprocessing
from vitviz.kindapi import kind_of
from vitviz.kinds.clip.network import ClipConfig, ClipImageModel
from vitviz.kinds.clip.text import TextConfig, pad_prompts
from vitviz.kinds.clip.tokenizer import END, START, ClipTokenizer, byte_table
from vitviz.kinds.vit.analysis import analyze_vit
from vitviz.pipeline.analysis import analyze

TARGET_ANALYSIS = 1.15  # (b) / (a), at most
TARGET_NEW_PROMPT = 1.5  # (c) / (a'), at most
TARGET_RESCORE = 0.3  # (r) / (a'), at most
TARGET_WINDOW_MS = 300.0  # (d) in milliseconds, at most (the window's Enter to its numbers)
PROMPTS = ["a photo of a dog", "a photo of a cat on a sofa", "a diagram", "a red car"]


def build(quick: bool, seed: int = 0) -> LoadedModel:
    """A CLIP of ViT-B/32's shapes (``quick``: a small one) with random weights."""
    torch.manual_seed(seed)
    width, depth, text_width = (192, 4, 128) if quick else (768, 12, 512)
    vit = ViTConfig(
        image_size=(224, 224), patch_size=32, num_classes=0, dim=width, depth=depth,
        heads=width // 64, pre_norm=True, norm_eps=1e-5, activation="quick_gelu",
    )  # fmt: skip
    chars = list(byte_table().values())
    vocab = {t: i for i, t in enumerate([*chars, *(c + "</w>" for c in chars), START, END])}
    text = TextConfig(
        vocab_size=len(vocab), width=text_width, depth=depth, heads=text_width // 64,
        mlp_hidden=4 * text_width, context_length=77, embed_dim=512, end_id=vocab[END],
    )  # fmt: skip
    model = ClipImageModel(ClipConfig(vit=vit, embed_dim=512, text=text)).eval()
    model.tokenizer = ClipTokenizer(vocab, [], context_length=77)
    with torch.no_grad():
        model.head.logit_scale.fill_(4.6)
    return LoadedModel(model=model, class_names=[], preprocessing=default_preprocessing(vit),
                       family="benchmark")  # fmt: skip


def make_cases(loaded: LoadedModel, x: torch.Tensor) -> dict[str, Callable[[], object]]:
    model = loaded.model
    kind = kind_of(loaded)
    dev = next(model.parameters()).device
    x_dev = x.to(dev)
    ids = pad_prompts([model.tokenizer.encode(p) for p in PROMPTS], 0).to(dev)
    kind.apply_prompts(loaded, PROMPTS)
    fresh = count()

    def bare() -> object:
        with torch.inference_mode():
            return model(x_dev), model.text(ids)

    def bare_image() -> object:
        with torch.inference_mode():
            return model(x_dev)

    def analysis() -> object:
        model._embedded.clear()
        kind.apply_prompts(loaded, PROMPTS)
        a = analyze(loaded, x[0])
        return a.rollout(), a.all_attention_maps()

    shown = analyze(loaded, x[0])  # the image the window shows, analysed once (graph kept)

    def new_prompt() -> object:
        typed = f"a photo of thing {next(fresh)}"  # never seen: its text pass runs
        kind.apply_prompts(loaded, [*PROMPTS, typed])
        # the kept graph: one backward pass from the new prompt's score, no forward pass
        return kind.rescore(shown, loaded).relevance(len(PROMPTS))

    def new_prompt_again() -> object:
        typed = f"a photo of other thing {next(fresh)}"
        kind.apply_prompts(loaded, [*PROMPTS, typed])
        a = analyze_vit(loaded, x[0], gradients=True)  # no graph kept: forward + backward
        return a.relevance(len(PROMPTS))

    @dataclass
    class Session:  # what the engine holds: the model and the image's analysis
        loaded: LoadedModel
        analysis: object

        @property
        def kind(self) -> object:
            return self.loaded.kind

    def rescore() -> object:
        kind.apply_prompts(loaded, PROMPTS)  # their text embeddings cached: no text pass
        return kind.rescore(shown, loaded).logits

    def window_prompt() -> object:
        typed = f"a drawing of thing {next(fresh)}"  # a new text: its text pass runs
        kind.apply_prompts(loaded, [*PROMPTS, typed])
        session = Session(loaded, kind.rescore(shown, loaded))  # no image-tower pass
        return kind.image_numbers(session)  # the numbers the window draws

    cases = {
        "a": bare,
        "a-image": bare_image,
        "b": analysis,
        "c": new_prompt,
        "c0": new_prompt_again,
        "r": rescore,
        "d": window_prompt,
    }
    return {k: synced(fn, dev) for k, fn in cases.items()}


LABELS = {
    "a": "(a) image tower + prompt head, fused, + one text pass",
    "a-image": "(a') the image tower alone, fused",
    "b": "(b) prompts set + analyze + rollout + CLS maps",
    "c": "(c) a new prompt: its text pass + its relevance",
    "c0": "(c0) as before: text pass + analysis again with gradients",
    "r": "(r) rescore: kept embedding × cached prompts",
    "d": "(d) a new prompt in the window: text pass + rescore + numbers",
}


def check_results(loaded: LoadedModel, x: torch.Tensor) -> list[str]:
    """The analysis sees what the fused forward sees: the same prompt scores."""
    model = loaded.model
    kind_of(loaded).apply_prompts(loaded, PROMPTS)
    with torch.inference_mode():
        fused = model(x.to(next(model.parameters()).device))[0].cpu()
    a = analyze(loaded, x[0])
    diff = float((a.logits - fused).abs().max())
    return [f"analysis logits differ from the fused forward by {diff:.2e}"] if diff > 1e-4 else []


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    add_device_option(p)
    args = read_args(p, argv)
    device = bench_device(args.device)
    repeats, warmup = repeats_and_warmup(args, quick=(3, 1), full=(15, 2))
    loaded = build(args.quick)
    loaded.model.to(device)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    wrong = check_results(loaded, x)
    times = interleaved(make_cases(loaded, x), repeats, warmup)
    stats = {k: Stats.of(v) for k, v in times.items()}
    base, image = stats["a"].median, stats["a-image"].median
    checks = {
        "b": Check("(b) analysis / bare towers", stats["b"].median / base, TARGET_ANALYSIS, True),
        "c": Check(
            "(c) new prompt's relevance / bare image forward",
            stats["c"].median / image,
            TARGET_NEW_PROMPT,
            True,
        ),
        "r": Check(
            "(r) rescore / bare image forward", stats["r"].median / image, TARGET_RESCORE, True
        ),
        "d": Check(
            "(d) a new prompt in the window, ms", stats["d"].median * 1e3, TARGET_WINDOW_MS, True
        ),
    }
    rows = []
    for key, s in stats.items():
        per_image = key.startswith("c") or key == "r"
        ratio = s.median / (image if per_image else base)
        unit = " × (a')" if per_image else " × (a)"
        check = checks.get(key)
        rows.append([
            *timing_cells(LABELS[key], s),
            f"{s.median * 1e3:.0f} ms" if key == "d" else f"{ratio:.2f}{unit}",
            *target_cells(check, baseline=key in ("a", "a-image")),
        ])  # fmt: skip
    cfg = loaded.model.config
    print_timed_report(
        f"CLIP analysis: image tower {cfg.depth} × {cfg.dim} at 224, patch 32; "
        f"{len(PROMPTS)} prompts; batch 1, {device.type}",
        ["case", "median", "p90", "min", "ratio", "target", "verdict"],
        rows,
        repeats,
        warmup,
        args.quick,
        device_line=f"device: {device_name(device)}",
    )
    print()
    kind_of(loaded).apply_prompts(loaded, PROMPTS)
    graph = analyze(loaded, x[0]).graph
    held = "none kept" if graph is None else f"{graph.saved_bytes(loaded.model) / 2**20:.1f} MiB"
    print(f"kept graph of one image (activations and attention, weights not counted): {held}")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    return finish(list(checks.values()), args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
