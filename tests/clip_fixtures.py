"""CLIP test material made in the test, no hub: a BPE vocabulary learnt from a few sentences,
saved as Hugging Face saves a CLIP tokenizer, and a tiny CLIPModel with random weights."""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path

import torch

from vitviz.kinds.clip.tokenizer import END, START, byte_table, normalise, pieces

CORPUS = (
    "a photo of a dog on a sofa. a photo of a cat! two cats and 3 dogs, it's a dog's life; "
    "we're here, they've gone, I'm done, you'll see, he'd say. the quick brown fox jumps over "
    "the lazy dog 1234567890 times. café naïve résumé — “quoted” (brackets) [x] {y} #tag @user "
    "a red car, a blue bird, a green tree, a sofa in a living room, a bowl of fruit, coffee cup"
)


def learn_bpe(text: str, merges: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A small byte-level BPE with CLIP's end-of-word mark, learnt greedily from ``text``."""
    table = byte_table()
    words = Counter(
        tuple([*w[:-1], w[-1] + "</w>"])
        for w in ("".join(table[b] for b in p.encode()) for p in pieces(normalise(text)))
    )
    chars = list(table.values())
    vocab = {c: i for i, c in enumerate(chars)}
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    learnt: list[tuple[str, str]] = []
    for _ in range(merges):
        counts: Counter[tuple[str, str]] = Counter()
        for word, n in words.items():
            for pair in pairwise(word):
                counts[pair] += n
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], p))
        learnt.append(best)
        vocab.setdefault(best[0] + best[1], len(vocab))
        merged = Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    vocab[START] = len(vocab)
    vocab[END] = len(vocab)
    return vocab, learnt


def save_openai_files(folder: Path, vocab: dict[str, int], merges: list[tuple[str, str]]) -> Path:
    """OpenAI's vocab.json + merges.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    lines = ["#version: 0.2", *(f"{a} {b}" for a, b in merges)]
    (folder / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def hf_tokenizer(vocab: dict[str, int], merges: list[tuple[str, str]]):
    from transformers import CLIPTokenizer

    return CLIPTokenizer(vocab=vocab, merges=merges)


def tiny_clip(vocab_size: int, seed: int = 0, eos_token_id: int | None = None):
    """A CLIPModel with random weights (biases and norms too, so a wrong mapping shows)."""
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(seed)
    text = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=24,
        eos_token_id=vocab_size - 1 if eos_token_id is None else eos_token_id,
    )
    vision = dict(
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
    )
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    model = CLIPModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.normal_(0.0, 0.2)
                if "norm" in name and name.endswith("weight"):
                    p.add_(1.0)
    return model
