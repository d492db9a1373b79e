"""Each tutorial layout, opened as model code: its attention, logits, maps and the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from test_modelcode_layouts import (
    LAYOUT_IDS,
    LAYOUTS,
    Layout,
    WrittenModel,
    attention_by_hand,
    sample_input,
    write_model,
)
from torch import Tensor, nn

from vitviz import explain
from vitviz.checkpoints import LoadedModel
from vitviz.cli import main
from vitviz.modelcode import CapturedModel, extract_logits, load_model_code, make_spec
from vitviz.pipeline.analysis import analyze

REPO = Path(__file__).resolve().parents[2]


def assert_probabilities_close(got: Tensor, want: Tensor) -> None:
    """Attention of two float32 computations: a softmax's rounding error is relative to each
    probability (dp = p·(ds − Σ p·ds) for score errors ds), so the tolerance is too."""
    torch.testing.assert_close(got, want, atol=1e-6, rtol=5e-4)


@pytest.fixture(scope="module", params=LAYOUTS, ids=LAYOUT_IDS)
def written(request, tmp_path_factory) -> WrittenModel:
    layout: Layout = request.param
    return write_model(layout, tmp_path_factory.mktemp(layout.key))


@pytest.fixture(scope="module")
def loaded(written: WrittenModel) -> LoadedModel:
    lay = written.layout
    return load_model_code(
        make_spec(written.file, lay.name, lay.args, written.weights, lay.settings)
    )


def test_config_describes_the_model(written: WrittenModel, loaded: LoadedModel):
    lay, cfg = written.layout, loaded.model.config
    assert isinstance(loaded.model, CapturedModel)
    assert loaded.family == "model-code" and loaded.path == written.file.resolve()
    assert (cfg.depth, cfg.heads, cfg.num_prefix_tokens, cfg.num_classes) == (
        lay.depth,
        lay.heads,
        lay.prefix,
        lay.num_classes,
    )
    assert (cfg.patch_size, cfg.image_size, cfg.grid_size, cfg.dim) == (8, (32, 32), (4, 4), 32)
    assert loaded.class_names == [f"class {i}" for i in range(lay.num_classes)]
    expected_mean = tuple(lay.settings.get("mean", (0.5, 0.5, 0.5)))
    assert loaded.preprocessing.mean == pytest.approx(expected_mean)


def test_captured_attention_is_the_attention_by_hand(written: WrittenModel, loaded: LoadedModel):
    x = torch.cat([sample_input(1), sample_input(2)])  # a batch of 2: heads are inferred per B
    with torch.no_grad():
        out = loaded.model.forward_explained(x)
    hand = attention_by_hand(written, x)
    lay = written.layout
    assert len(out.attentions) == len(hand) == lay.depth
    N = lay.prefix + 16
    for got, want in zip(out.attentions, hand, strict=True):
        assert got.shape == (2, lay.heads, N, N)
        assert_probabilities_close(got, want)
    assert out.grid == (4, 4) and out.num_prefix_tokens == lay.prefix


def test_logits_are_unchanged_by_capturing(written: WrittenModel, loaded: LoadedModel):
    x = sample_input(3)
    with torch.no_grad():
        plain = loaded.model(x)  # the user's forward, fast paths allowed
        captured = loaded.model.forward_explained(x, hidden_states=True).logits
        independent = extract_logits(
            written.model(x), written.model
        )  # built apart from vitviz, same weights
    torch.testing.assert_close(captured, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(plain, independent, atol=1e-5, rtol=1e-5)
    with torch.enable_grad():  # the gradient path changes no value either
        with_grad = loaded.model.forward_explained(x).logits.detach()
    torch.testing.assert_close(with_grad, plain, atol=1e-5, rtol=1e-5)


def test_rollout_relevance_and_statistics_run(loaded: LoadedModel, photo_files):
    a = analyze(loaded, photo_files["chelsea"])
    L, H = loaded.model.config.depth, loaded.model.config.heads
    N = loaded.model.config.num_prefix_tokens + 16
    assert a.attention.shape == (L, H, N, N) and a.grid == (4, 4)
    maps = {
        "rollout": a.rollout(),
        "rollout_patch": a.rollout(patch=(1, 2)),
        "gradient_rollout": a.gradient_rollout(),
        "relevance": a.relevance(),
        "heads": a.all_attention_maps(),
    }
    for name, m in maps.items():
        assert m.shape[-2:] == (4, 4), name
        assert torch.isfinite(m).all(), name
        assert float(m.abs().max()) > 0, name
    assert a.token_norms.shape == (L, N) and float(a.token_norms.min()) > 0
    assert torch.isfinite(a.mean_distance).all() and a.mean_distance.shape == (L, H)
    assert len(a.top_k(3)) == 3


def test_attention_gradients_reach_every_layer(loaded: LoadedModel):
    g = explain.attention_gradients(loaded.model, sample_input(4), target=1)
    assert len(g.gradients) == loaded.model.config.depth
    for grad, attn in zip(g.gradients, g.attentions, strict=True):
        assert grad.shape == attn.shape
        assert float(grad.abs().max()) > 0


def test_cli_explain_opens_the_file(written: WrittenModel, tmp_path: Path, photo_files):
    lay = written.layout
    argv = [
        "explain",
        str(photo_files["coffee"]),
        "--model-code",
        f"{written.file}:{lay.name}",
        "--model-args",
        json.dumps(lay.args),
        "--checkpoint",
        str(written.weights),
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "out"),
    ]
    if lay.settings:
        config = tmp_path / "settings.json"
        config.write_text(json.dumps(lay.settings))
        argv += ["--config", str(config)]
    assert main(argv) == 0
    with np.load(tmp_path / "out" / "coffee.npz", allow_pickle=False) as z:
        N = lay.prefix + 16
        assert z["attention"].shape == (lay.depth, lay.heads, N, N)
        assert z["rollout"].shape == z["relevance"].shape == (4, 4)
        assert np.isfinite(z["relevance"]).all()
        assert int(z["num_prefix_tokens"]) == lay.prefix
    assert (tmp_path / "out" / "coffee_heads.png").is_file()
    assert (tmp_path / "out" / "coffee_relevance.png").is_file()


# -- gradients of nn.MultiheadAttention models, against a hand-written attention --------------


def _mha_by_hand(
    self,
    query,
    key,
    value,
    key_padding_mask=None,
    need_weights=True,
    attn_mask=None,
    average_attn_weights=True,
    is_causal=False,
):
    """nn.MultiheadAttention self-attention written out, keeping its probabilities."""
    x = query if self.batch_first else query.transpose(0, 1)
    B, N, E = x.shape
    W, b = self.in_proj_weight, self.in_proj_bias
    q, k, v = (
        (x @ W[i * E : (i + 1) * E].T + b[i * E : (i + 1) * E])
        .reshape(B, N, self.num_heads, -1)
        .transpose(1, 2)
        for i in range(3)
    )
    a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    self.kept.append(a)
    out = (a @ v).transpose(1, 2).reshape(B, N, E) @ self.out_proj.weight.T + self.out_proj.bias
    return (out if self.batch_first else out.transpose(0, 1)), None


@pytest.mark.parametrize("key", ["multihead", "encoder_batch_first", "encoder_sequence_first"])
def test_multihead_attention_gradients_match_by_hand(key: str, tmp_path: Path):
    written = write_model(LAYOUTS[LAYOUT_IDS.index(key)], tmp_path)
    lay = written.layout
    loaded = load_model_code(make_spec(written.file, lay.name, lay.args, written.weights))
    x = sample_input(5)
    got = explain.attention_gradients(loaded.model, x, target=2)
    kept: list[Tensor] = []
    for m in written.model.modules():
        if isinstance(m, nn.MultiheadAttention):
            m.kept = kept
            m.forward = types.MethodType(_mha_by_hand, m)
    with torch.enable_grad():
        logits = extract_logits(written.model(x.clone().requires_grad_(True)), written.model)
        want = torch.autograd.grad(logits[0, 2], kept)
    # Both sides are float32 sums in different orders (torch's fused in-projection and
    # (N, B, D) layout against x @ Wᵀ), through peaked attention (scores up to ~400, where one
    # float32 ulp is 3e-5): tolerances follow the scale. Gradients: 1e-4 of their largest
    # magnitude (measured: 1.2e-5 at worst over 20 inputs and 4 CPU code paths).
    for g, w in zip(got.gradients, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-4 * float(w.abs().max()), rtol=1e-4)
    # Probabilities: a softmax's error is relative to p (dp = p·(ds − Σ p·ds)), 9e-5 at worst.
    for a, k in zip(got.attentions, kept, strict=True):
        assert_probabilities_close(a, k.detach())


# -- info, and the real command line ----------------------------------------------------------


def test_cli_info_with_model_code_and_no_checkpoint(tmp_path: Path, capsys):
    lay = LAYOUTS[LAYOUT_IDS.index("fused_qkv")]
    written = write_model(lay, tmp_path)
    assert main(["info", "--model-code", f"{written.file}:{lay.name}", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["family"] == "model-code"
    assert d["config"]["depth"] == 3 and d["config"]["num_prefix_tokens"] == 1
    assert d["provenance"]["state_dict"] is None
    assert main(["info", str(written.weights), "--model-code", f"{written.file}:{lay.name}"]) == 0
    text = capsys.readouterr().out
    assert "model-code" in text and "depth 3, heads 2, patch 8, image 32×32" in text


def test_cli_explain_in_a_subprocess(tmp_path: Path, photo_files):
    lay = LAYOUTS[LAYOUT_IDS.index("deit_distilled")]
    written = write_model(lay, tmp_path)
    names = tmp_path / "names.txt"
    names.write_text("\n".join(["tabby", "rocket", "coffee", "astronaut", "teapot"]))
    config = tmp_path / "settings.json"
    config.write_text(json.dumps({"class_names": str(names)}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vitviz.cli",
            "explain",
            str(photo_files["rocket"]),
            "--model-code",
            f"{written.file}:{lay.name}",
            "--model-args",
            json.dumps(lay.args),
            "--checkpoint",
            str(written.weights),
            "--config",
            str(config),
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "rocket.jpg:" in done.stderr
    with np.load(tmp_path / "out" / "rocket.npz", allow_pickle=False) as z:
        assert list(z["class_names"]) == ["tabby", "rocket", "coffee", "astronaut", "teapot"]
        assert z["attention"].shape == (2, 2, 18, 18)
