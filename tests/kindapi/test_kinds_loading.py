"""Loading, model code and training go through the kinds: a toy kind defined here, in this file
alone, gets its checkpoint family tried, its native files written and read back, its model-code
setting checked and its training settings, preset, CLI option and checks, with no product file
naming it. The kinds' registry and their torch-free sides import without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.families import all_families
from vitviz.checkpoints.families.base import Conversion, Family, Source
from vitviz.checkpoints.native import default_preprocessing, save_checkpoint
from vitviz.kindapi import all_kinds, get_kind, register_kind, unregister_kind
from vitviz.kindapi.base import KindBase
from vitviz.kindapi.sides import CodeModelRequest, SettingValue, TrainingField, TrainSettings
from vitviz.modelcode.errors import ModelCodeError
from vitviz.modelcode.spec import make_spec, setting_keys

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


# -- a toy kind: global-average-pooled patches, no attention worth the name ---------------------
@dataclass
class ToyConfig:
    image_size: tuple[int, int] = (8, 8)
    patch_size: int = 4
    in_channels: int = 3
    num_classes: int = 4
    width: int = 6

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "image_size": list(self.image_size)}


class ToyNet(nn.Module):
    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.config = config
        self.toy = nn.Linear(config.in_channels, config.width)
        self.head = nn.Linear(config.width, config.num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.toy(x.mean(dim=(2, 3))))


def _toy_detect(source: Source) -> bool:
    return "toy.weight" in source.state


def _toy_convert(source: Source) -> Conversion:
    w = source.state["toy.weight"]
    config = ToyConfig(in_channels=w.shape[1], width=w.shape[0])
    config.num_classes = source.state["head.weight"].shape[0]
    return Conversion(
        family="toy-layout",
        config=config,
        state=dict(source.state),
        class_names=[f"c{i}" for i in range(config.num_classes)],
        preprocessing=default_preprocessing(config),
        kind="toy",
    )


class ToyCode:
    settings = ("toy_pool",)

    def parse_setting(self, name: str, value: object) -> object:
        if value not in ("mean", "max"):
            raise ValueError(f"toy_pool must be mean or max, got {value!r}")
        return value

    def claims(self, model: nn.Module) -> bool:
        return False

    def wrap(self, inner: nn.Module, request: CodeModelRequest) -> tuple[nn.Module, str]:
        raise AssertionError("never claimed")


class ToyTraining:
    fields = (TrainingField("toy_width", 6, "Width (toy)", flag="--toy-width", help="toy width"),)
    presets: Mapping[str, Mapping[str, SettingValue]] = {"toy": {"model": "toy", "toy_width": 5}}
    preset_labels: Mapping[str, str] = {"toy": "A toy"}
    keeps_preset_on_dataset = True

    def model_kwargs(self, cfg: TrainSettings, num_classes: int, in_channels: int) -> dict:
        return dict(in_channels=cfg.in_channels or in_channels, num_classes=num_classes,
                    width=cfg.toy_width)  # fmt: skip

    def problems(self, cfg: TrainSettings) -> list[str]:
        return [] if cfg.toy_width % 2 else [f"toy width {cfg.toy_width} must be odd"]

    def build(self, cfg: TrainSettings, num_classes: int, channels: int) -> nn.Module:
        return ToyNet(ToyConfig(**self.model_kwargs(cfg, num_classes, channels)))


class ToyKind(KindBase):
    """A kind's loading side on ``KindBase``: its families, model code and training."""

    name = "toy"
    label = "Toy"
    families = (Family("toy-layout", _toy_detect, _toy_convert),)
    model_code = ToyCode()
    training = ToyTraining()

    def owns(self, model: nn.Module) -> bool:
        return isinstance(model, ToyNet)

    def config_from_dict(self, data: dict[str, object]) -> ToyConfig:
        return ToyConfig(**{**data, "image_size": tuple(data["image_size"])})

    def build_from_state(self, config: ToyConfig, state: Mapping[str, Tensor]) -> nn.Module:
        model = ToyNet(config)
        model.load_state_dict(state, strict=True)
        return model.eval()

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, None]:
        return model(x), None


@pytest.fixture
def toy() -> Iterator[ToyKind]:
    kind = register_kind(ToyKind())
    try:
        yield kind
    finally:
        unregister_kind("toy")


# -- loading ---------------------------------------------------------------------------------
def test_families_are_own_then_each_kinds_then_the_generic_layouts(toy: ToyKind) -> None:
    families = all_families()
    by_kind = [f for kind in all_kinds() for f in kind.families]
    assert families[1 : 1 + len(by_kind)] == tuple(by_kind)
    generic = get_kind("vit").families  # the ViT, registered last, brings the generic layouts
    assert families[-len(generic) :] == tuple(generic)
    # registered last: tried after every kind but the ViT, whose generic layouts take what is left
    assert families[-len(generic) - 1] is toy.families[0]


def test_a_kinds_family_converts_and_its_kind_builds(tmp_path: Path, toy: ToyKind) -> None:
    net = ToyNet(ToyConfig(width=5, num_classes=3)).eval()
    path = tmp_path / "toy.safetensors"
    save_file(net.state_dict(), str(path))
    loaded = load_checkpoint(path)
    assert isinstance(loaded.model, ToyNet) and loaded.family == "toy-layout"
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(loaded.model(x), net(x))


def test_a_native_file_names_its_kind_and_is_rebuilt_by_it(tmp_path: Path, toy: ToyKind) -> None:
    net = ToyNet(ToyConfig(width=7)).eval()
    path = save_checkpoint(net, tmp_path / "toy.safetensors")
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["model_kind"] == "toy"
    loaded = load_checkpoint(path)
    assert isinstance(loaded.model, ToyNet) and loaded.model.config.width == 7
    x = torch.randn(1, 3, 8, 8)
    assert torch.equal(loaded.model(x), net(x))


def _vit_file(tmp_path: Path) -> tuple[VisionTransformer, Path]:
    cfg = ViTConfig(image_size=16, patch_size=8, dim=16, depth=1, heads=2, num_classes=3)
    vit = VisionTransformer(cfg).eval()
    return vit, save_checkpoint(vit, tmp_path / "vit.safetensors")


def _resave(src: Path, dst: Path, **changes: str | None) -> Path:
    with safe_open(str(src), framework="pt") as f:
        meta = dict(f.metadata())
    for k, v in changes.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    save_file(load_file(str(src)), str(dst), metadata=meta)
    return dst


def test_native_files_from_before_the_kinds_still_load(tmp_path: Path) -> None:
    """A ViT file without ``model_kind`` (every one written before it) opens as a ViT."""
    vit, path = _vit_file(tmp_path)
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["model_kind"] == "vit"
    old = _resave(path, tmp_path / "old.safetensors", model_kind=None)
    loaded = load_checkpoint(old)
    assert isinstance(loaded.model, VisionTransformer)
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        assert torch.equal(loaded.model(x), vit(x))


def test_a_native_file_of_an_unknown_kind_is_refused_in_one_line(tmp_path: Path) -> None:
    _, path = _vit_file(tmp_path)
    future = _resave(path, tmp_path / "future.safetensors", model_kind="future")
    with pytest.raises(CheckpointError, match=r"kind 'future'.*Update vitviz") as info:
        load_checkpoint(future)
    assert "\n" not in str(info.value)


# -- model code ------------------------------------------------------------------------------
def test_a_kinds_model_code_setting_is_accepted_and_checked_by_it(toy: ToyKind) -> None:
    assert "toy_pool" in setting_keys() and "swin_windows" in setting_keys()
    spec = make_spec("model.py", "Net", settings={"toy_pool": "max"})
    assert spec.kind_settings == {"toy_pool": "max"}
    with pytest.raises(ModelCodeError, match="toy_pool must be mean or max"):
        make_spec("model.py", "Net", settings={"toy_pool": "median"})
    unregister_kind("toy")
    try:
        with pytest.raises(ModelCodeError, match="unknown model-code settings"):
            make_spec("model.py", "Net", settings={"toy_pool": "max"})
    finally:
        register_kind(toy)


# -- training (in a child: TrainConfig's fields are read from the kinds at its import) --------
TOY_TRAINING = """
import json, sys
sys.path.insert(0, {tests!r})
from vitviz.kindapi import register_kind
from test_kinds_loading import ToyKind
register_kind(ToyKind())
from vitviz.training.config import MODEL_KINDS, PRESETS, TrainConfig, equivalent_command
from vitviz.training.validate import validate_training_config
from vitviz.training.models import build_model
from vitviz.training.command import config_from_args
from vitviz.cli import build_parser
cfg = config_from_args(build_parser().parse_args(["train", "--preset", "toy", "--toy-width", "4"]))
net = build_model(cfg.replace(toy_width=3), 5, 1)
print(json.dumps({{
    "kinds": list(MODEL_KINDS),
    "preset": PRESETS["toy"],
    "default": TrainConfig().toy_width,
    "model": cfg.model,
    "width": cfg.toy_width,
    "problems": validate_training_config(cfg.replace(device="cpu")),
    "command": equivalent_command(cfg),
    "net": [type(net).__name__, net.config.width, net.config.num_classes, net.config.in_channels],
    "saved": TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg,
}}))
"""


def test_a_kind_brings_its_training_settings_preset_option_and_checks() -> None:
    code = TOY_TRAINING.format(tests=str(Path(__file__).resolve().parent))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["kinds"] == ["vit", "swin", "toy"]
    assert got["preset"] == {"model": "toy", "toy_width": 5} and got["default"] == 6
    assert got["model"] == "toy" and got["width"] == 4
    assert got["problems"] == ["toy width 4 must be odd"]
    assert "--preset toy" in got["command"] and "--toy-width 4" in got["command"]
    assert got["net"] == ["ToyNet", 3, 5, 1]
    assert got["saved"]


def test_the_kinds_and_their_declared_sides_import_without_torch() -> None:
    """The window's Training tab and the CLI's parser read the kinds before torch loads."""
    code = (
        "import sys\n"
        "import vitviz.training.config, vitviz.training.validate, vitviz.modelcode.spec\n"
        "from vitviz.kindapi import all_kinds\n"
        "sides = [(k.training and k.training.fields, k.model_code) for k in all_kinds()]\n"
        "assert any(k.training for k in all_kinds())\n"
        "keys = vitviz.modelcode.spec.setting_keys()\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
