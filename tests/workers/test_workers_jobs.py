"""The engine's jobs as plain functions (no thread, no Qt): what the window gets is what
analyze() computes, and expected mistakes become short UserFacingErrors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.faithfulness import evaluate_methods
from vitviz.explain.methods import all_methods, get_method
from vitviz.pipeline.analysis import analyze
from vitviz.workers import jobs
from vitviz.workers.messages import MapParams


@pytest.fixture
def state(tiny_ckpt: Path) -> jobs.EngineState:
    s = jobs.EngineState()
    jobs.load_model(s, tiny_ckpt)
    return s


def test_image_result_matches_analyze(
    state: jobs.EngineState, tiny_ckpt: Path, photo_files
) -> None:
    result = jobs.analyze_image(state, photo_files["chelsea"], "chelsea.png")
    reference = analyze(load_checkpoint(tiny_ckpt), photo_files["chelsea"])
    np.testing.assert_allclose(result.probs, reference.probs.numpy(), atol=1e-6)
    assert result.top_class == reference.top_class
    assert result.grid == reference.grid
    np.testing.assert_allclose(result.attention, reference.attention.numpy(), atol=1e-6)
    assert not result.attention.flags.writeable  # shared with the window read-only
    h, w = result.display.shape[:2]
    assert (w, h) == reference.source.size  # the source at its own aspect ratio


@pytest.mark.parametrize("query", [None, (0, 0), (2, 3)])
def test_raw_maps_equal_the_analysis_maps(state: jobs.EngineState, photo_files, query) -> None:
    jobs.analyze_image(state, photo_files["coffee"], "coffee.png")
    a = state.analysis
    head, mean, prefix = jobs.raw_maps(a.attention.numpy(), query, a.grid, a.num_prefix_tokens)
    np.testing.assert_array_equal(head, a.all_attention_maps(query).numpy())
    np.testing.assert_allclose(mean, a.all_attention_maps(query).numpy().mean(1), atol=1e-7)
    np.testing.assert_array_equal(prefix, a.prefix_attention(query).numpy())


def test_raw_maps_without_prefix_tokens_average_the_patch_queries() -> None:
    rng = np.random.default_rng(0)
    att = rng.random((2, 3, 6, 6)).astype(np.float32)
    head, _, prefix = jobs.raw_maps(att, None, (2, 3), 0)
    np.testing.assert_allclose(head, att.mean(axis=2).reshape(2, 3, 2, 3), rtol=1e-6)
    assert prefix.shape == (2, 3, 0)


PARAMS = {
    "rollout": {"fusion": "max", "discard_ratio": 0.2, "start_layer": 1},
    "gradient-rollout": {"discard_ratio": 0.2, "start_layer": 1},
    "relevance": {"start_layer": 1},
    "dino-masks": {"layer": 1, "head": 1, "threshold": 0.5},
    "grad-sam": {},
    "random": {"seed": 3},
}


@pytest.mark.parametrize("method", list(PARAMS))
def test_compute_maps_follows_the_method(state: jobs.EngineState, photo_files, method: str) -> None:
    jobs.analyze_image(state, photo_files["chelsea"], "chelsea.png")
    a = state.analysis
    values = tuple(PARAMS[method].items())
    params = MapParams(query=(1, 2), method=method, values=values, target_class=3)
    result = jobs.compute_maps(state, params)
    expected = {
        "rollout": lambda: a.rollout((1, 2), "max", None, 0.2, 1),
        "gradient-rollout": lambda: a.gradient_rollout(3, (1, 2), 0.2, 1),
        "relevance": lambda: a.relevance(3, (1, 2), 1),
        "dino-masks": lambda: a.dino_masks(1, 0.5, (1, 2))[1].float(),
        "grad-sam": lambda: get_method("grad-sam")(a, (1, 2), 3),
        "random": lambda: get_method("random")(a, None, None, {"seed": 3}),
    }
    assert result.error is None
    np.testing.assert_allclose(result.method_map, expected[method]().numpy(), atol=1e-6)
    assert result.target_class == 3


def test_compute_maps_reports_a_method_that_cannot_run(state: jobs.EngineState, photo_files):
    jobs.analyze_image(state, photo_files["chelsea"], "chelsea.png")
    params = MapParams(method="rollout", values=(("start_layer", 99),))
    result = jobs.compute_maps(state, params)
    assert result.method_map is None and "start_layer" in result.error


def test_method_table_reaches_the_window_as_plain_data() -> None:
    table = jobs.method_table()
    assert [m.name for m in table] == [m.name for m in all_methods()]
    rollout = next(m for m in table if m.name == "rollout")
    assert [p.name for p in rollout.parameters] == ["fusion", "discard_ratio", "start_layer"]
    assert rollout.parameters[0].choices == ("mean", "max", "min")


def test_faithfulness_job_equals_evaluate_methods(state: jobs.EngineState, photo_files) -> None:
    jobs.analyze_image(state, photo_files["chelsea"], "chelsea.png")
    result = jobs.faithfulness(state, "rollout", {"fusion": "max"}, steps=5)
    ref = evaluate_methods(
        state.analysis, ["rollout", "random"], steps=5, params={"rollout": {"fusion": "max"}}
    )
    assert result.target_class == ref.target_class and not result.has_mask
    for name in ("rollout", "random"):
        np.testing.assert_allclose(result.curves[name].deletion, ref.methods[name].deletion)
        np.testing.assert_allclose(result.curves[name].insertion, ref.methods[name].insertion)
        assert result.curves[name].deletion_auc == ref.methods[name].deletion_auc


def test_expected_mistakes_are_short_messages(tmp_path: Path, tiny_ckpt: Path) -> None:
    s = jobs.EngineState()
    with pytest.raises(jobs.UserFacingError, match="Open a checkpoint first"):
        jobs.analyze_image(s, tmp_path / "x.png", "x.png")
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"\x00" * 10)
    with pytest.raises(jobs.UserFacingError, match=r"broken\.safetensors") as info:
        jobs.load_model(s, bad)
    assert info.value.kind == "checkpoint" and s.loaded is None
    jobs.load_model(s, tiny_ckpt)
    not_image = tmp_path / "notes.png"
    not_image.write_text("hello")
    with pytest.raises(jobs.UserFacingError, match=r"notes\.png") as info:
        jobs.analyze_image(s, not_image, "notes.png")
    assert info.value.kind == "image"
    with pytest.raises(jobs.UserFacingError):
        jobs.set_device(s, "cuda:7")
