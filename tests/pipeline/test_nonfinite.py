"""NaN and infinity are never a prediction: analyze raises NonFiniteError (a
ValueError with one line) for non-finite inputs, logits, attention or gradients, and the window's
job turns it into a plain message."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from checkpoint_cases import photo, tv_checkpoint

from vitviz.checkpoints import load_checkpoint
from vitviz.explain import gradients as explain_gradients
from vitviz.imaging import Preprocessing
from vitviz.pipeline.analysis import NonFiniteError, analyze
from vitviz.workers import jobs


def _poisoned(key: str, index: tuple, value: float):
    def edit(state: dict) -> dict:
        tensor = state[key].clone()
        tensor[index] = value
        return {**state, key: tensor}

    return edit


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (_poisoned("conv_proj.weight", (0, 0, 0, 0), float("nan")), "logits are NaN"),
        (_poisoned("heads.head.bias", (1,), float("inf")), "logits are NaN or infinite"),
        (_poisoned("encoder.pos_embedding", (0, 3, 5), float("-inf")), "logits are NaN"),
    ],
    ids=["nan-patch-weight", "inf-head-bias", "inf-position"],
)
def test_non_finite_weights_are_an_error_not_a_prediction(tmp_path: Path, edit, words: str) -> None:
    loaded = load_checkpoint(tv_checkpoint(tmp_path, edit=edit))
    with pytest.raises(NonFiniteError) as info:
        analyze(loaded, photo(tmp_path))
    assert isinstance(info.value, ValueError)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_nan_attention_with_finite_logits_is_refused(tmp_path: Path, monkeypatch) -> None:
    """A head that ignores every token (no head weights are read past the CLS) could still give
    finite logits: the attention is checked on its own."""
    loaded = load_checkpoint(tv_checkpoint(tmp_path))
    real = loaded.model.forward_explained

    last = loaded.model.config.depth - 1

    def forward(x, **kwargs):
        sink = kwargs.get("attention_sink")
        if sink is not None:  # the layers are handed over as they come (vitviz.kinds.vit.capture)

            def poisoned(layer, a):
                if layer == last:
                    a[..., -1] = float("nan")  # a patch key nobody's logit depends on
                sink(layer, a)

            kwargs["attention_sink"] = poisoned
        out = real(x, **kwargs)
        if out.attentions:
            out.attentions[-1][..., -1] = float("nan")
        return out

    monkeypatch.setattr(loaded.model, "forward_explained", forward)
    with pytest.raises(NonFiniteError, match="attention is NaN or infinite"):
        analyze(loaded, torch.zeros(3, 32, 32))


def test_an_input_that_overflows_float32_names_the_preprocessing(tmp_path: Path) -> None:
    loaded = load_checkpoint(tv_checkpoint(tmp_path))
    prep = Preprocessing(image_size=(32, 32), mean=(0.5, 0.5, 0.5), std=(1e-40, 1e-40, 1e-40))
    with pytest.raises(NonFiniteError, match="model input holds NaN or infinite values"):
        analyze(loaded, photo(tmp_path), preprocessing=prep)
    with pytest.raises(NonFiniteError, match="mean and std"):
        analyze(loaded, torch.full((3, 32, 32), float("nan")))


def test_a_huge_but_finite_mean_overflows_inside_the_model(tmp_path: Path) -> None:
    loaded = load_checkpoint(tv_checkpoint(tmp_path))
    prep = Preprocessing(image_size=(32, 32), mean=(1e30, 1e30, 1e30))
    with pytest.raises(NonFiniteError, match="overflow float32"):
        analyze(loaded, photo(tmp_path), preprocessing=prep)


def test_non_finite_gradients_are_refused(tmp_path: Path, monkeypatch) -> None:
    loaded = load_checkpoint(tv_checkpoint(tmp_path))
    real = explain_gradients._Products.done  # both gradient passes keep the gradients reduced

    def overflowing(self):
        products = real(self)
        products.weighted[0, ..., 0] = float("inf")
        return products

    monkeypatch.setattr(explain_gradients._Products, "done", overflowing)
    with pytest.raises(NonFiniteError, match="gradients are NaN or infinite"):
        analyze(loaded, photo(tmp_path), gradients=True)


def test_the_windows_job_shows_it_as_a_plain_message(tmp_path: Path) -> None:
    state = jobs.EngineState()
    inf_token = _poisoned("class_token", (0, 0, 0), float("inf"))
    jobs.load_model(state, tv_checkpoint(tmp_path, edit=inf_token))
    with pytest.raises(jobs.UserFacingError) as info:
        jobs.analyze_image(state, str(photo(tmp_path)), "photo.png")
    assert info.value.kind == "image"
    assert str(info.value).startswith("photo.png: the model's logits are NaN or infinite")
    assert state.analysis is None  # nothing shown as a result
