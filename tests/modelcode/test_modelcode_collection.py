"""The collection of tutorial-style model files (tests/tutorial_models, MANIFEST.json), each
opened with nothing but its class or function and its arguments, as ``vitviz-cli explain
--model-code FILE:NAME --model-args JSON --checkpoint WEIGHTS`` does: the ones that open give the
logits of the file's own forward pass and the structure listed; the ones refused say what the
manifest says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_modelcode_layouts import import_file, scramble
from torch import nn

from vitviz.modelcode import ModelCodeError, extract_logits, load_model_code, make_spec

FOLDER = Path(__file__).resolve().parents[1] / "tutorial_models"
MODELS = json.loads((FOLDER / "MANIFEST.json").read_text(encoding="utf-8"))["models"]


def built(entry: dict, seed: int = 0) -> nn.Module:
    """The file's model built the plain way, weights scrambled (seeded), eval mode."""
    module = import_file(FOLDER / entry["file"])
    torch.manual_seed(seed)
    model = getattr(module, entry["name"])(**entry["args"])
    scramble(model, seed)
    return model.eval()


@pytest.mark.parametrize("entry", MODELS, ids=[m["file"].removesuffix(".py") for m in MODELS])
def test_each_file_opens_or_is_refused_as_listed(entry: dict, tmp_path: Path):
    file = FOLDER / entry["file"]
    if entry["expect"] == "refuse":  # refused before weights matter (some can't be built here)
        with pytest.raises(ModelCodeError) as info:
            load_model_code(make_spec(file, entry["name"], entry["args"]))
        assert entry["message"] in str(info.value)
        return
    model = built(entry)
    weights = tmp_path / "weights.pth"
    torch.save(model.state_dict(), weights)
    loaded = load_model_code(make_spec(file, entry["name"], entry["args"], weights))
    cfg = loaded.model.config
    size = entry["image_size"]
    assert (cfg.depth, cfg.heads, cfg.num_prefix_tokens, cfg.num_classes) == (
        entry["depth"],
        entry["heads"],
        entry["prefix"],
        entry["classes"],
    )
    assert (cfg.in_channels, cfg.image_size, cfg.patch_size, cfg.outputs) == (
        entry["channels"],
        (size, size),
        entry["patch"],
        entry["outputs"],
    )
    rows = entry.get("fixed_batch", 2)  # a model fixing its batch size runs that many rows
    g = torch.Generator().manual_seed(1)
    x = torch.randn(rows, entry["channels"], size, size, generator=g)
    with torch.no_grad():
        own = extract_logits(model(x), model)[:2]
        got = loaded.model.forward_explained(x[:2]).logits
    if entry["outputs"] == "probabilities":
        got = got.exp()
    torch.testing.assert_close(got, own, atol=1e-5, rtol=1e-5)
    grouped = any("one head at a time" in note for note in loaded.notes)
    assert grouped == entry.get("one_head_at_a_time", False)


def test_the_collection_is_counted():
    """What the report says: how many files open with nothing but the code and arguments."""
    kinds = [m["expect"] for m in MODELS]
    assert (len(kinds), kinds.count("open"), kinds.count("refuse")) == (20, 19, 1)
