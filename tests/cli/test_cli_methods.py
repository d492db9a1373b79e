"""The method table on the command line: `vitviz-cli methods`, `explain
--method` / `--param`, and the method list of docs/methods.md, all read from the one table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_checks import one_line_error
from conftest import random_vit
from PIL import Image

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.cli import main
from vitviz.cli.methods import methods_markdown
from vitviz.explain import (
    Method,
    Parameter,
    all_methods,
    get_method,
    register_method,
    unregister_method,
)
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.export import NPZ_KEYS

METHODS_DOC = Path(__file__).resolve().parents[2] / "docs" / "methods.md"
BUILTIN = tuple(m.name for m in all_methods())  # at import: the table as shipped


def _explain(ckpt: Path, image: Path, out: Path, *extra: str) -> int:
    argv = ["explain", str(image), "--checkpoint", str(ckpt), "--device", "cpu"]
    return main([*argv, "--out", str(out), *extra])


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """A small non-square photo-like image (the tiny model squashes it to 32 × 32)."""
    g = np.random.default_rng(0)
    pixels = (g.random((30, 45, 3)) * 255).astype(np.uint8)
    pixels[8:20, 10:30] = (250, 40, 30)
    path = tmp_path / "scene.png"
    Image.fromarray(pixels).save(path)
    return path


# -- vitviz-cli methods ---------------------------------------------------------------------------


def test_methods_lists_the_table_as_text(capsys: pytest.CaptureFixture) -> None:
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if line and not line[0].isspace()]
    assert tuple(names) == BUILTIN
    for m in all_methods():
        assert f"{m.name}  ({m.label})" in out
        assert m.description in out and m.key in out
        for p in m.parameters:
            line = next(ln for ln in out.splitlines() if f"--param {m.name}.{p.name}" in ln)
            assert f"(default {p.default})" in line
    assert "--param rollout.fusion: mean | max | min (default mean)" in out
    assert "--param attention.layer in -1..L−1 (default -1)" in out


def test_methods_json_is_the_tables_description(capsys: pytest.CaptureFixture) -> None:
    assert main(["methods", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == json.loads(json.dumps([m.to_dict() for m in all_methods()]))
    by_name = {d["name"]: d for d in listed}
    assert list(by_name) == list(BUILTIN)
    assert by_name["grad-sam"]["needs_gradients"] is True
    assert by_name["random"]["parameters"][0]["default"] == 0


def test_the_methods_doc_lists_every_method_of_the_table() -> None:
    """docs/methods.md's method table is exactly `vitviz-cli methods --markdown` of the table,
    and the faithfulness table of "What to expect" has one row per method."""
    text = METHODS_DOC.read_text(encoding="utf-8")
    block = re.search(
        r"<!-- methods table: vitviz-cli methods --markdown -->\n(.*?)\n<!-- end of methods table",
        text,
        re.S,
    )
    assert block is not None, "docs/methods.md lost its methods table markers"
    assert block.group(1) == methods_markdown(all_methods())
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", block.group(1), re.M)
    assert tuple(rows) == BUILTIN
    expect = text[text.index("## What to expect from each method") :]
    expect = expect.split("\n## ", 1)[0]  # to the next section, or the end
    measured = re.findall(r"^\| `([a-z0-9-]+)` \| ([0-9.]+) \| ([0-9.]+) \|", expect, re.M)
    scalar = [m.name for m in all_methods() if m.map_kind == "scalar"]  # colours: no order
    assert [name for name, *_ in measured] == scalar
    assert "vitviz-cli faithfulness resources/samples/*.png --checkpoint " in expect
    assert "resources/models/vitviz-shapes-default.safetensors" in expect


# -- a method added at run time -------------------------------------------------------------------


def _toy(a, query, target_class, params):
    """The patch index times ``scale``: (gh, gw)."""
    gh, gw = a.grid
    return torch.arange(gh * gw, dtype=torch.float32).reshape(gh, gw) * params["scale"]


@pytest.fixture
def toy():
    method = Method(
        "toy",
        "Toy (patch index)",
        _toy,
        (Parameter("scale", float, 1.0, "Scale", range=(0.0, 10.0)),),
        description="the patch index, scaled",
    )
    register_method(method)
    yield method
    unregister_method("toy")


def test_a_toy_method_is_listed_and_explained(
    toy: Method, tmp_path: Path, tiny_ckpt: Path, image: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["methods"]) == 0
    text = capsys.readouterr().out
    assert "toy  (Toy (patch index))" in text and "--param toy.scale in 0.0..10.0" in text
    assert main(["methods", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[-1] == json.loads(json.dumps(toy.to_dict()))

    out = tmp_path / "out"
    extra = ("--method", "toy", "--param", "toy.scale=2.5", "--bare")
    assert _explain(tiny_ckpt, image, out, *extra) == 0
    with np.load(out / "scene.npz") as z:
        assert list(z.files) == [*NPZ_KEYS, "map_toy"]
        assert z["map_toy"].dtype == np.float32 and z["map_toy"].shape == (4, 4)
        np.testing.assert_array_equal(z["map_toy"], np.arange(16).reshape(4, 4) * 2.5)
    with Image.open(out / "scene_toy.png") as im:
        assert im.format == "PNG" and im.size == (45, 30)


# -- explain --method: every built-in method ------------------------------------------------------


PARAMS = {
    "attention": {"layer": 0, "head": 1},
    "dino-masks": {"layer": 1, "head": -1, "threshold": 0.4},
    "random": {"seed": 7},
}


def test_explain_writes_every_methods_map_as_the_table_computes_it(
    tmp_path: Path, tiny_ckpt: Path, image: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    params = [f"{m}.{k}={v}" for m, values in PARAMS.items() for k, v in values.items()]
    extra = ["--fusion", "max", "--discard", "0.2", "--start-layer", "1", "--class", "3"]
    extra += ["--method", *BUILTIN[:5], "--method", *BUILTIN[5:]]
    for p in params:
        extra += ["--param", p]
    assert _explain(tiny_ckpt, image, out, *extra) == 0
    assert "Traceback" not in capsys.readouterr().err
    a = analyze(load_checkpoint(tiny_ckpt), image, gradients=True)
    shared = {"fusion": "max", "discard_ratio": 0.2, "start_layer": 1}
    with np.load(out / "scene.npz") as z:
        assert list(z.files) == [*NPZ_KEYS, *(get_method(n).key for n in BUILTIN)]
        for name in BUILTIN:
            method = get_method(name)
            own = {p.name for p in method.parameters}
            values = {k: v for k, v in shared.items() if k in own} | PARAMS.get(name, {})
            want = method(a, None, 3, values).numpy()
            got = z[method.key]
            assert got.dtype == np.float32 and got.shape[:2] == a.grid == (4, 4), name
            np.testing.assert_allclose(got, want, atol=1e-6, err_msg=name)
        # today's keys stay, computed with the same settings
        np.testing.assert_allclose(z["rollout"], z["map_rollout"], atol=0)
        np.testing.assert_allclose(z["relevance"], a.relevance(3, start_layer=1).numpy(), atol=1e-6)
        assert int(z["target_class"]) == 3
    # the options reached the methods: not the defaults' maps
    with np.load(out / "scene.npz") as z:
        assert not np.allclose(z["map_rollout"], get_method("rollout")(a, None, 3).numpy())
        assert not np.allclose(z["map_attention"], get_method("attention")(a).numpy())
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(["scene_heads.png", *(f"scene_{n}.png" for n in BUILTIN)])
    for (
        name
    ) in BUILTIN:  # titled figures (tests/pipeline/test_export_figure.py) around the 45 × 30 map
        with Image.open(out / f"scene_{name}.png") as im:
            assert im.width > 45 and im.height > 30


def _headless(tmp_path: Path) -> Path:
    return save_checkpoint(random_vit(num_classes=0), tmp_path / "nohead.safetensors")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--method", "lime"], ["--method", "unknown method 'lime'", "accepted: attention, "]),
        (["--param", "rollout.fusion"], ["--param rollout.fusion", "METHOD.PARAMETER=VALUE"]),
        (["--param", "lime.x=1"], ["--param lime.x=1", "unknown method 'lime'"]),
        (["--param", "rollout.seed=1"], ["has no parameter 'seed'", "fusion, discard_ratio"]),
        (["--param", "rollout.fusion=median"], ["fusion must be one of mean, max, min"]),
        (["--param", "random.seed=x"], ["--param random.seed=x", "seed must be a whole number"]),
        (
            ["--method", "attention", "--param", "attention.layer=2"],
            ["attention: layer must be in -1..1 (got 2)", "2 layers of 2 heads"],
        ),
        (
            ["--param", "attention.layer=0"],
            ["--param attention.layer", "not among the methods", "add --method attention"],
        ),
    ],
)
def test_bad_methods_and_parameters_exit_2_with_one_line(
    tmp_path: Path,
    tiny_ckpt: Path,
    image: Path,
    capsys: pytest.CaptureFixture,
    extra: list[str],
    words: list[str],
) -> None:
    out = tmp_path / "out"
    assert _explain(tiny_ckpt, image, out, *extra) == 2
    assert one_line_error(capsys, *words).startswith("vitviz-cli: ")
    assert not out.exists()


def test_a_method_that_does_not_apply_names_those_that_do(
    tmp_path: Path, image: Path, capsys: pytest.CaptureFixture
) -> None:
    ckpt = _headless(tmp_path)
    out = tmp_path / "out"
    assert _explain(ckpt, image, out, "--method", "grad-sam") == 2
    line = one_line_error(capsys)
    usable = [m.name for m in all_methods() if not m.needs_head]
    assert "Grad-SAM needs a classification head" in line
    assert line.endswith("methods for this model: " + ", ".join(usable))
    assert not out.exists()
    # what applies runs, and today's gradient keys stay NaN
    assert _explain(ckpt, image, out, "--method", "random", "dino-masks") == 0
    with np.load(out / "scene.npz") as z:
        assert z["map_random"].shape == z["map_dino_masks"].shape == (4, 4)
        assert np.isnan(z["relevance"]).all()
    assert (out / "scene_random.png").is_file() and not (out / "scene_relevance.png").exists()


def test_default_explain_is_unchanged_by_the_table(
    tmp_path: Path, tiny_ckpt: Path, image: Path
) -> None:
    out = tmp_path / "out"
    assert _explain(tiny_ckpt, image, out) == 0
    with np.load(out / "scene.npz") as z:
        assert list(z.files) == list(NPZ_KEYS)
    assert sorted(p.name for p in out.iterdir()) == [
        "images.parquet",
        "run.json",
        "scene.npz",
        "scene_heads.png",
        "scene_relevance.png",
        "scene_rollout.png",
    ]
