"""What the user is told when their model file can't be used, and that nothing else breaks."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from test_modelcode_layouts import FUSED_QKV, LAYOUT_IDS, LAYOUTS, write_model

from vitviz.cli import main
from vitviz.modelcode import (
    ModelCodeError,
    load_model_code,
    make_spec,
    parse_args_text,
    parse_target,
    read_class_names,
    scan_names,
)
from vitviz.modelcode.importing import module_name_for

NO_ATTENTION = '''
"""An MLP over patches: Conv2d patches, LayerNorm, Linear mixing, no attention at all."""
import torch
from torch import nn


class PatchMLP(nn.Module):
    def __init__(self, image_size=32, patch_size=8, dim=32, num_classes=5):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch_size, patch_size)
        self.layers = nn.ModuleList(
            [nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU()) for _ in range(4)]
        )
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        for layer in self.layers:
            x = x + layer(x)
        return torch.softmax(self.head(x.mean(dim=1)), dim=-1)
'''


def write(folder: Path, source: str, name: str = "model.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def error_of(spec) -> str:
    with pytest.raises(ModelCodeError) as info:
        load_model_code(spec)
    return str(info.value)


def test_a_file_that_raises_at_import(tmp_path: Path):
    path = write(tmp_path, "import torch\n\nSIZE = 1 / 0\n\n\nclass ViT:\n    pass\n")
    message = error_of(make_spec(path, "ViT"))
    assert message.startswith("model.py could not be imported: ZeroDivisionError: division by zero")
    assert "model.py, line 3: SIZE = 1 / 0" in message
    assert module_name_for(path.resolve()) not in sys.modules  # nothing half-imported is kept


def test_a_file_with_a_syntax_error_or_a_missing_package(tmp_path: Path):
    path = write(tmp_path, "import torch\n\ndef f(:\n    pass\n")
    message = error_of(make_spec(path, "f"))
    assert "SyntaxError" in message and "line 3" in message
    path = write(tmp_path, "import torch\nimport a_package_nobody_has_xyz\n", "other.py")
    message = error_of(make_spec(path, "ViT"))
    assert "ModuleNotFoundError: No module named 'a_package_nobody_has_xyz'" in message
    assert "other.py, line 2" in message


def test_a_missing_file(tmp_path: Path):
    assert "no such file" in error_of(make_spec(tmp_path / "nothing.py", "ViT"))


def test_an_unknown_name_lists_what_the_file_defines(tmp_path: Path):
    path = write(tmp_path, FUSED_QKV)
    message = error_of(make_spec(path, "ViT"))
    assert "has no class or function named 'ViT'" in message
    assert message.endswith(
        "It defines: Attention (class), Block (class), VisionTransformer (class)"
    )


def test_arguments_that_do_not_fit_show_the_signature(tmp_path: Path):
    path = write(tmp_path, FUSED_QKV)
    message = error_of(make_spec(path, "VisionTransformer", {"n_layers": 4}))
    assert "don't fit VisionTransformer(image_size=32, patch_size=8, num_classes=5" in message
    assert "n_layers" in message


def test_a_constructor_that_raises_says_where(tmp_path: Path):
    path = write(tmp_path, FUSED_QKV)
    message = error_of(make_spec(path, "VisionTransformer", {"heads": 0}))
    code = "self.scale = (dim // heads) ** -0.5"
    line = path.read_text().splitlines().index(f"        {code}") + 1
    assert message == (
        "building VisionTransformer with {'heads': 0} failed: ZeroDivisionError: integer "
        f"division or modulo by zero (model.py, line {line}: {code})"
    )


def test_a_forward_that_fails_says_where(tmp_path: Path):
    source = FUSED_QKV.replace("return self.proj(x)", "return self.proj(x[:, :, :3])")
    path = write(tmp_path, source)
    message = error_of(make_spec(path, "VisionTransformer"))
    assert message.startswith("running VisionTransformer on a 1×3×32×32 input failed: RuntimeError")
    assert "return self.proj(x[:, :, :3])" in message


def test_a_state_dict_that_does_not_match_lists_the_keys(tmp_path: Path):
    written = write_model(LAYOUTS[LAYOUT_IDS.index("fused_qkv")], tmp_path)
    state = torch.load(written.weights, weights_only=True)
    state["extra.weight"] = state.pop("head.weight")
    state["pos_embed"] = torch.zeros(1, 5, 32)
    torch.save(state, tmp_path / "bad.pth")
    message = error_of(make_spec(written.file, "VisionTransformer", {}, tmp_path / "bad.pth"))
    assert "bad.pth does not match the model VisionTransformer" in message
    assert "missing keys (1): head.weight" in message
    assert "unexpected keys (1): extra.weight" in message
    assert "pos_embed (1, 5, 32) in the file, (1, 17, 32) in the model" in message


def test_a_wrapped_state_dict_is_unwrapped(tmp_path: Path):
    written = write_model(LAYOUTS[LAYOUT_IDS.index("fused_qkv")], tmp_path)
    state = torch.load(written.weights, weights_only=True)
    torch.save(
        {"net": {f"backbone.{k}": v for k, v in state.items()}, "epoch": 3},
        tmp_path / "wrapped.pth",
    )
    loaded = load_model_code(
        make_spec(written.file, "VisionTransformer", {}, tmp_path / "wrapped.pth")
    )
    assert any("'backbone.'" in n for n in loaded.notes)


def test_a_pickled_whole_model_is_refused_and_nothing_runs(tmp_path: Path):
    written = write_model(LAYOUTS[LAYOUT_IDS.index("fused_qkv")], tmp_path)
    torch.save(written.model, tmp_path / "whole.pth")  # a pickle that needs the class to load
    message = error_of(make_spec(written.file, "VisionTransformer", {}, tmp_path / "whole.pth"))
    assert "needs code to load" in message and "state_dict" in message


def test_no_attention_says_what_was_looked_at(tmp_path: Path):
    path = write(tmp_path, NO_ATTENTION)
    message = error_of(make_spec(path, "PatchMLP"))
    assert (
        "no attention was seen in the forward pass of PatchMLP: looked at 5 Linear, 1 Conv2d, "
        "4 LayerNorm, 0 MultiheadAttention, 0 Softmax; no softmax over a square (B, H, N, N) "
        "score tensor and no scaled_dot_product_attention call was seen"
    ) in message
    assert "1 softmax, 0 scaled_dot_product_attention and 0 MultiheadAttention calls" in message
    assert "results that were not square attention: 1×5" in message


def test_no_patch_size_asks_for_it(tmp_path: Path):
    source = """
    import torch
    from torch import nn


    class Unfolded(nn.Module):
        def __init__(self, image_size=32, psize=8):
            super().__init__()
            self.unfold = nn.Unfold(psize, stride=psize)
            self.proj = nn.Linear(3 * psize * psize, 16)

        def forward(self, x):
            return self.proj(self.unfold(x).transpose(1, 2)).mean(1)
    """
    path = write(tmp_path, source, "unfolded.py")
    # The patch size is read from the Linear over the unfolded 3·8·8 patches (and checked by
    # running it); the model is then refused for what it is: it has no attention.
    assert error_of(make_spec(path, "Unfolded")).startswith("no attention was seen")
    # Each patch with its two coordinates appended: 3·8·8 + 2 inputs say no patch size.
    with_xy = source.replace(
        "nn.Linear(3 * psize * psize, 16)", "nn.Linear(3 * psize * psize + 2, 16)"
    )
    path = write(tmp_path, with_xy, "with_xy.py")
    message = error_of(make_spec(path, "Unfolded"))
    assert message == (
        "could not find the patch size: the model has no Conv2d whose stride equals its kernel, "
        "no patch_size argument or attribute, and its first Linear layer does not take C·p² "
        "(3·p² RGB or p² grayscale) inputs; give it in the settings: --config FILE.json holding "
        '{"patch_size": P} (in the window: Patch size)'
    )
    loaded_error = error_of(make_spec(path, "Unfolded", settings={"patch_size": 8}))
    assert loaded_error.startswith("running Unfolded on a 1×3×32×32 input failed: RuntimeError")


def test_wrong_class_names_and_settings(tmp_path: Path):
    path = write(tmp_path, FUSED_QKV)
    message = error_of(make_spec(path, "VisionTransformer", settings={"class_names": ["a", "b"]}))
    assert message == "2 class names were given for a model with 5 classes"
    with pytest.raises(ModelCodeError, match="unknown model-code settings"):
        make_spec(path, "VisionTransformer", settings={"heads": 4})
    with pytest.raises(ModelCodeError, match="three numbers"):
        make_spec(path, "VisionTransformer", settings={"mean": [0.5, 0.5]})


def test_a_model_file_can_import_its_sibling_files(tmp_path: Path):
    layers = FUSED_QKV.split("class VisionTransformer")[0]
    write(tmp_path, layers, "layers.py")
    model = "import torch\nfrom torch import nn\nfrom layers import Block\n\n\nclass " + (
        "VisionTransformer" + FUSED_QKV.split("class VisionTransformer")[1]
    )
    path = write(tmp_path, model)
    loaded = load_model_code(make_spec(path, "VisionTransformer"))
    assert loaded.model.config.depth == 3
    assert str(tmp_path) not in sys.path
    sys.modules.pop("layers", None)


def test_parsing_targets_arguments_and_names(tmp_path: Path):
    assert parse_target("a/b/model.py:ViT") == (Path("a/b/model.py"), "ViT")
    assert parse_target(r"C:\models\model.py:Outer.build") == (
        Path(r"C:\models\model.py"),
        "Outer.build",
    )
    with pytest.raises(ModelCodeError, match=r"FILE\.py:NAME"):
        parse_target("model.py")
    assert parse_args_text(None) == {} and parse_args_text(' {"dim": 8} ') == {"dim": 8}
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"depth": 2}))
    assert parse_args_text(f"@{args_file}") == {"depth": 2}
    with pytest.raises(ModelCodeError, match="JSON object"):
        parse_args_text("[1, 2]")
    with pytest.raises(ModelCodeError, match="not valid JSON"):
        parse_args_text("{dim: 8}")
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"1": "b", "0": "a"}))
    assert read_class_names(names) == ["a", "b"]
    found = scan_names(write(tmp_path, FUSED_QKV))
    assert [(n.name, n.is_module) for n in found][-1] == ("VisionTransformer", True)
    assert scan_names(write(tmp_path, "def f(:\n", "broken.py")) == []


def test_the_cli_reports_a_bad_file_in_one_line(tmp_path: Path, capsys, photo_files):
    path = write(tmp_path, "raise ImportError('needs timm')\n")
    code = main(
        [
            "explain",
            str(photo_files["coffee"]),
            "--model-code",
            f"{path}:ViT",
            "--out",
            str(tmp_path / "out"),
            "--device",
            "cpu",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        "vitviz-cli: model.py could not be imported: ImportError: needs timm "
        "(model.py, line 1: raise ImportError('needs timm'))"
    )
    assert main(["info", "--model-code", "model.py"]) == 2
    assert "FILE.py:NAME" in capsys.readouterr().err
    assert main(["info", "--model-args", "{}"]) == 2
    assert "--model-args needs --model-code" in capsys.readouterr().err
    assert main(["info"]) == 2
    assert "give a checkpoint" in capsys.readouterr().err


def test_mean_and_std_come_from_the_user_or_the_arguments(tmp_path: Path):
    source = FUSED_QKV.replace("heads=2):", "heads=2, image_mean=(0.1, 0.2, 0.3)):")
    path = write(tmp_path, source)
    loaded = load_model_code(make_spec(path, "VisionTransformer"))
    assert loaded.preprocessing.mean == pytest.approx((0.1, 0.2, 0.3))
    assert loaded.preprocessing.std == (0.5, 0.5, 0.5)
    assert "mean [0.1, 0.2, 0.3] from the argument image_mean" in loaded.notes
    assert "std not given: 0.5 per channel was used" in loaded.notes
    loaded = load_model_code(make_spec(path, "VisionTransformer", settings={"mean": 0.4}))
    assert loaded.preprocessing.mean == pytest.approx((0.4, 0.4, 0.4))
