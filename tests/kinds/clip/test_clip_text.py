"""CLIP's text side computes what Hugging Face's does: the tokenizer's ids (from either file
form) and the text tower's embeddings, on a vocabulary and random weights made in the test."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from clip_fixtures import CORPUS, hf_tokenizer, learn_bpe, save_openai_files, tiny_clip

from vitviz.kinds.clip.text import TextTower, hf_text_config, hf_text_state, pad_prompts
from vitviz.kinds.clip.tokenizer import ClipTokenizer, TokenizerError

PROMPTS = (
    "a photo of a dog on a sofa",
    "A PHOTO   of a\tCat!",
    "it's a dog's life, we're 42",
    "café naïve — “quoted” (x)",
    "zebra xylophone qwerty",  # words the merges never saw: single bytes
    "<|endoftext|> inside",
    "",
    "ünïcödé 日本語 🙂 ½ ²",
)


@pytest.fixture(scope="module")
def bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    return learn_bpe(CORPUS, merges=150)


@pytest.mark.parametrize("form", ["tokenizer.json", "vocab.json+merges.txt"])
def test_token_ids_equal_the_hugging_face_tokenizer(bpe, tmp_path: Path, form: str) -> None:
    vocab, merges = bpe
    reference = hf_tokenizer(vocab, merges)
    if form == "tokenizer.json":
        reference.save_pretrained(tmp_path)
    else:
        save_openai_files(tmp_path, vocab, merges)
    ours = ClipTokenizer.from_folder(tmp_path)
    for text in PROMPTS:
        assert ours.encode(text) == reference(text)["input_ids"], text


def test_long_prompts_are_cut_to_the_context_keeping_the_end_token(bpe) -> None:
    vocab, merges = bpe
    ours = ClipTokenizer(vocab, merges, context_length=10)
    ids = ours.encode("a photo of a dog " * 20)
    assert len(ids) == 10 and ids[0] == ours.start_id and ids[-1] == ours.end_id


def test_a_folder_without_tokenizer_files_is_named(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="no tokenizer files"):
        ClipTokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Unigram"}}')
    with pytest.raises(TokenizerError, match="not a BPE"):
        ClipTokenizer.from_folder(tmp_path)


@pytest.mark.parametrize("legacy_eos", [False, True])
def test_text_embeddings_equal_hugging_face(bpe, legacy_eos: bool) -> None:
    vocab, merges = bpe
    model = tiny_clip(len(vocab), eos_token_id=2 if legacy_eos else None)
    cfg = model.config
    text_cfg = hf_text_config(cfg.text_config.to_dict(), cfg.projection_dim)
    assert text_cfg.pool_argmax is legacy_eos
    tower = TextTower(text_cfg).eval()
    tower.load_state_dict(hf_text_state(model.state_dict(), text_cfg.depth))
    tok = ClipTokenizer(vocab, merges, context_length=text_cfg.context_length)
    encoded = [tok.encode(p) for p in PROMPTS]
    ids = pad_prompts(encoded, tok.end_id)
    with torch.no_grad():
        ours = tower(ids)
        theirs = model.get_text_features(input_ids=ids, attention_mask=torch.ones_like(ids))
        theirs = getattr(theirs, "pooler_output", theirs)  # transformers 5 returns an output
    assert ours.shape == (len(PROMPTS), cfg.projection_dim)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
    # each prompt alone (no padding) gives the same embedding as in the padded batch
    with torch.no_grad():
        alone = torch.cat([tower(torch.tensor([e])) for e in encoded])
    torch.testing.assert_close(alone, ours, rtol=1e-5, atol=1e-6)
