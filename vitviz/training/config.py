"""TrainConfig: every setting of a training run, and the dataset spec it names.

The settings every run has are written here; each model kind with a training side
(``ModelKind.training``, ``vitviz.kindapi.sides.TrainingSide``) adds its own fields (a ViT's
width and depth, a Swin's per-stage lists, ...), its presets and its CLI options, read from the
kinds' registry when this module is first imported. Torch-free, so the window and the CLI can build,
check and store a config before torch loads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vitviz.kindapi import all_kinds
from vitviz.kindapi.sides import SettingValue, TrainingField, TrainingSide

DATASET_KINDS = ("shapes", "random", "folder", "cifar10")
AMP_MODES = ("auto", "off", "bf16", "fp16")
COMPILE_MODES = ("auto", "on", "off")
DEFAULT_MODEL = "vit"  # the tutorials' model: TrainConfig()'s kind


def _training_sides() -> dict[str, TrainingSide]:
    """Kind name -> its training side: the default model's first, then in registration order."""
    sides = {kind.name: kind.training for kind in all_kinds() if kind.training is not None}
    return {name: sides[name] for name in sorted(sides, key=lambda name: name != DEFAULT_MODEL)}


def _kind_fields(sides: dict[str, TrainingSide]) -> tuple[TrainingField, ...]:
    """Every kind's own settings, in the sides' order; a name two kinds declare is one field
    (ValueError where their defaults differ)."""
    fields: dict[str, TrainingField] = {}
    for side in sides.values():
        for f in side.fields:
            if f.name in fields and fields[f.name].default != f.default:
                raise ValueError(f"two model kinds declare training setting {f.name!r} differently")
            fields.setdefault(f.name, f)
    return tuple(fields.values())


SIDES: dict[str, TrainingSide] = _training_sides()
MODEL_KINDS: tuple[str, ...] = tuple(SIDES)
KIND_FIELDS: tuple[TrainingField, ...] = _kind_fields(SIDES)


def training_side(model: str) -> TrainingSide:
    """The training side of the kind called ``model``; ValueError naming the trainable kinds."""
    try:
        return SIDES[model]
    except KeyError:
        raise ValueError(f"model must be one of {', '.join(MODEL_KINDS)} (got {model!r})") from None


def _with_kind_fields(cls: type) -> type:
    """``cls`` as a frozen dataclass with the kinds' own fields after its own."""
    for f in KIND_FIELDS:
        cls.__annotations__[f.name] = "SettingValue"
        setattr(cls, f.name, f.default)
    return dataclass(frozen=True)(cls)


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed ``--dataset`` value: ``shapes``, ``random``, ``folder:PATH`` or ``cifar10:PATH``."""

    kind: str
    path: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.path}" if self.path else self.kind


def parse_dataset(spec: str) -> DatasetSpec:
    """``"folder:/data/pets"`` -> DatasetSpec("folder", "/data/pets"); ValueError if unknown."""
    kind, sep, path = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in DATASET_KINDS:
        raise ValueError(
            f"unknown dataset {spec!r}; use shapes, random, folder:PATH or cifar10:PATH"
        )
    if kind in ("folder", "cifar10"):
        if not path.strip():
            raise ValueError(f"dataset {kind} needs a path: {kind}:PATH")
        return DatasetSpec(kind, path.strip())
    if sep and path.strip():
        raise ValueError(f"dataset {kind} takes no path (got {spec!r})")
    return DatasetSpec(kind)


# Generated datasets get these sizes when train_size / val_size are not set.
DEFAULT_SIZES = {"shapes": (10_000, 1_000), "random": (512, 128)}


@_with_kind_fields
class TrainConfig:
    """A training run. Defaults: the tutorials' CIFAR-10 ViT (32 px, patch 8, dim 64, depth 4,
    heads 4, MLP ratio 4) with AdamW, warmup + cosine, label smoothing and stochastic depth.

    After the fields below come the kinds' own (``KIND_FIELDS``, e.g. a ViT's ``dim``, a Swin's
    per-stage widths); a kind reads its own and the shared model settings (image and patch
    size, MLP ratio, stochastic depth, channels).
    """

    dataset: str = "shapes"  # shapes | random | folder:PATH | cifar10:PATH
    name: str = ""  # run name, the suffix of the run folder; default: the dataset kind
    out_dir: str | None = None  # run folder; None: a new one under runs_dir()
    # -- model (shared; each kind adds its own fields) --------------------------------------------
    image_size: int = 32
    patch_size: int = 8
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.1
    in_channels: int | None = None  # 1 grayscale, 3 RGB; None: 1 for a grayscale folder, else 3
    model: str = DEFAULT_MODEL  # a MODEL_KINDS entry: the kind of network
    # -- data ------------------------------------------------------------------------------------
    train_size: int | None = None  # generated: how many; folder/CIFAR: at most this many
    val_size: int | None = None
    val_fraction: float = 0.1  # folder without train/ and val/: the seeded validation share
    data_seed: int | None = None  # None: the run's seed
    fresh_each_epoch: bool = True  # generated datasets: new training images every epoch
    augment: bool = True  # random crop with padding + horizontal flip, on whole batches
    crop_padding: int | None = None  # None: image_size // 8
    # -- optimisation ----------------------------------------------------------------------------
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-5
    warmup_epochs: float = 1.0
    weight_decay: float = 0.05
    label_smoothing: float = 0.1
    grad_clip: float = 1.0  # max gradient norm; 0 turns clipping off
    amp: str = "auto"  # CUDA only: auto (bf16 where supported, else fp16) | off | bf16 | fp16
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    compile: str = "auto"  # torch.compile of the step: auto (CUDA only) | on | off
    threads: int | None = None  # CPU threads for torch; None: torch's default
    seed: int = 0
    # -- reporting -------------------------------------------------------------------------------
    step_report_interval_s: float = 0.25  # at most one step event per interval (0: every step)
    probe: bool = True  # attention snapshot of a fixed validation image after every epoch
    command: str = ""  # how the run was started (provenance); empty: the equivalent CLI command

    def __post_init__(self) -> None:
        for f in KIND_FIELDS:  # lists from JSON -> tuples (frozen: equality, hashing)
            value = getattr(self, f.name)
            if isinstance(f.default, tuple) and isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))

    # -- derived ---------------------------------------------------------------------------------
    @property
    def dataset_spec(self) -> DatasetSpec:
        return parse_dataset(self.dataset)

    @property
    def run_name(self) -> str:
        return self.name or self.dataset_spec.kind

    @property
    def effective_data_seed(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed

    @property
    def effective_crop_padding(self) -> int:
        return self.image_size // 8 if self.crop_padding is None else self.crop_padding

    @property
    def side(self) -> TrainingSide:
        """Its model kind's training side (ValueError for a model no kind trains)."""
        return training_side(self.model)

    def model_kwargs(self, num_classes: int, in_channels: int = 3) -> dict[str, SettingValue]:
        """Keyword arguments of its kind's model config for this run (a ViTConfig's, a
        SwinConfig's); ``in_channels``: what the data turned out to have when the config leaves
        it to the data."""
        return self.side.model_kwargs(self, num_classes, in_channels)

    # -- (de)serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown training settings: {', '.join(unknown)}")
        return cls(**d)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)


# name -> TrainConfig fields, every kind's presets ("tutorial": the defaults).
PRESETS: dict[str, dict[str, Any]] = {
    name: dict(values) for side in SIDES.values() for name, values in side.presets.items()
}
PRESET_LABELS: dict[str, str] = {
    name: label for side in SIDES.values() for name, label in side.preset_labels.items()
}
SHAPES_PRESET: dict[str, Any] = PRESETS["shapes"]


# The preset a data set starts from: the one made for it (shapes: 64 px, sized to learn them), else
# the tutorial's 32 px ViT (CIFAR-10's own size; a folder's images are resized to it).
DATASET_PRESETS: dict[str, str] = {
    "shapes": "shapes",
    "cifar10": "tutorial",
    "folder": "tutorial",
    "random": "tutorial",
}


def preset_for_dataset(kind: str) -> str:
    """The name of the preset a data set of ``kind`` (a DATASET_KINDS entry) starts from."""
    return DATASET_PRESETS.get(kind, "tutorial")


def preset_config(preset: str, /, **overrides: Any) -> TrainConfig:
    """The config of a named preset (a PRESETS key: ``tutorial``, ``shapes``, a kind's) with
    fields overridden."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    return TrainConfig(**{**PRESETS[preset], **overrides})


_FLAGS = (  # TrainConfig field -> vitviz-cli train option
    ("dataset", "--dataset"),
    ("model", "--model"),
    ("epochs", "--epochs"),
    ("image_size", "--image-size"),
    ("patch_size", "--patch-size"),
    *((f.name, f.flag) for f in KIND_FIELDS if f.flag),
    ("in_channels", "--channels"),
    ("batch_size", "--batch-size"),
    ("lr", "--lr"),
    ("device", "--device"),
    ("compile", "--compile"),
    ("seed", "--seed"),
    ("train_size", "--train-size"),
    ("val_size", "--val-size"),
    ("threads", "--threads"),
    ("name", "--name"),
)


def equivalent_command(config: TrainConfig) -> str:
    """The ``vitviz-cli train`` command line that repeats ``config`` (for provenance): the
    preset whose other settings it has, plus an option for each field that differs from it."""
    import shlex

    flagged = {name for name, _ in _FLAGS} | {"augment", "out_dir", "command"}
    preset = "tutorial"
    for name, values in PRESETS.items():
        base = TrainConfig(**values)
        same = all(getattr(config, f) == getattr(base, f) for f in values if f not in flagged)
        if same and config.model == base.model:
            preset = name  # the last match wins: "shapes" over "tutorial"
    base = TrainConfig(**PRESETS[preset])
    parts = ["vitviz-cli", "train"] + (["--preset", preset] if preset != "tutorial" else [])
    for field_name, flag in _FLAGS:
        value = getattr(config, field_name)
        if field_name == "dataset" or (
            value not in (None, "") and value != getattr(base, field_name)
        ):
            text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
            parts += [flag, text]
    if not config.augment and base.augment:
        parts.append("--no-augment")
    if config.out_dir:
        parts += ["--out", config.out_dir]
    return shlex.join(parts)
