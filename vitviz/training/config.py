"""TrainConfig: every setting of a training run, and the dataset spec it names.

Torch-free, so the window and the CLI can build, check and store a config before torch loads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

DATASET_KINDS = ("shapes", "random", "folder", "cifar10")
AMP_MODES = ("auto", "off", "bf16", "fp16")
COMPILE_MODES = ("auto", "on", "off")
POS_EMBEDS = ("learned", "sincos", "sincos2d")
MODEL_KINDS = ("vit", "swin")
_SWIN_LISTS = ("swin_dims", "swin_depths", "swin_heads")


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


@dataclass(frozen=True)
class TrainConfig:
    """A training run. Defaults: the tutorials' CIFAR-10 ViT (32 px, patch 8, dim 64, depth 4,
    heads 4, MLP ratio 4) with AdamW, warmup + cosine, label smoothing and stochastic depth."""

    dataset: str = "shapes"  # shapes | random | folder:PATH | cifar10:PATH
    name: str = ""  # run name, the suffix of the run folder; default: the dataset kind
    out_dir: str | None = None  # run folder; None: a new one under runs_dir()
    # -- model -----------------------------------------------------------------------------------
    image_size: int = 32
    patch_size: int = 8
    dim: int = 64
    depth: int = 4
    heads: int = 4
    mlp_ratio: float = 4.0
    pos_embed: str = "learned"
    drop_path_rate: float = 0.1
    in_channels: int | None = None  # 1 grayscale, 3 RGB; None: 1 for a grayscale folder, else 3
    model: str = "vit"  # vit | swin
    # Swin only (model="swin"): per-stage widths, blocks and heads; windows of window_size
    # tokens a side; image_size, patch_size, mlp_ratio and drop_path_rate as for the ViT
    window_size: int = 4
    swin_dims: tuple[int, ...] = (48, 96, 192)
    swin_depths: tuple[int, ...] = (2, 2, 2)
    swin_heads: tuple[int, ...] = (3, 6, 12)
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
        for name in _SWIN_LISTS:  # lists from JSON -> tuples (frozen: equality, hashing)
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))

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

    def model_kwargs(self, num_classes: int, in_channels: int = 3) -> dict[str, Any]:
        """Keyword arguments of vitviz.model.ViTConfig for this run (``in_channels``: what the
        data turned out to have when the config leaves it to the data)."""
        return dict(
            in_channels=self.in_channels or in_channels,
            image_size=self.image_size,
            patch_size=self.patch_size,
            num_classes=num_classes,
            dim=self.dim,
            depth=self.depth,
            heads=self.heads,
            mlp_ratio=self.mlp_ratio,
            pos_embed=self.pos_embed,
            drop_path_rate=self.drop_path_rate,
        )

    def swin_kwargs(self, num_classes: int, in_channels: int = 3) -> dict[str, Any]:
        """Keyword arguments of vitviz.model.SwinConfig for this run (``model="swin"``)."""
        return dict(
            in_channels=self.in_channels or in_channels,
            image_size=(self.image_size, self.image_size),
            patch_size=self.patch_size,
            num_classes=num_classes,
            dims=tuple(self.swin_dims),
            depths=tuple(self.swin_depths),
            heads=tuple(self.swin_heads),
            window_sizes=(self.window_size,) * len(self.swin_depths),
            mlp_hidden_dims=tuple(round(self.mlp_ratio * d) for d in self.swin_dims),
            drop_path_rate=self.drop_path_rate,
        )

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


# A ViT that learns the synthetic shapes on a laptop CPU: 64 px, 8 × 8 patches of 8 px, the
# tutorials' width and depth. Fresh shapes every epoch (600,000 images in all), so neither
# augmentation nor stochastic depth is needed; fixed 2-D sine-cosine positions learn faster than
# a learned table here.
SHAPES_PRESET: dict[str, Any] = dict(
    dataset="shapes",
    image_size=64,
    patch_size=8,
    dim=64,
    depth=4,
    heads=4,
    pos_embed="sincos2d",
    train_size=10_000,
    val_size=1_000,
    augment=False,
    drop_path_rate=0.0,
    epochs=60,
    batch_size=64,
    lr=2e-3,
    warmup_epochs=1.0,
)

# A small Swin (the issue's): 32 px, 2-pixel patches, 4 × 4 windows on 16², 8² and 4² grids,
# widths 48-96-192, two blocks (W-MSA, SW-MSA) per stage; the tutorial's optimisation.
SWIN_PRESET: dict[str, Any] = dict(
    model="swin",
    image_size=32,
    patch_size=2,
    window_size=4,
    swin_dims=(48, 96, 192),
    swin_depths=(2, 2, 2),
    swin_heads=(3, 6, 12),
)

PRESETS: dict[str, dict[str, Any]] = {
    "tutorial": {},
    "shapes": SHAPES_PRESET,
    "swin": SWIN_PRESET,
}


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
    """The config of a named preset (``tutorial``, ``shapes``, ``swin``) with fields
    overridden."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    return TrainConfig(**{**PRESETS[preset], **overrides})


_FLAGS = (  # TrainConfig field -> vitviz-cli train option
    ("dataset", "--dataset"),
    ("model", "--model"),
    ("epochs", "--epochs"),
    ("image_size", "--image-size"),
    ("patch_size", "--patch-size"),
    ("dim", "--dim"),
    ("depth", "--depth"),
    ("heads", "--heads"),
    ("window_size", "--window-size"),
    ("swin_dims", "--swin-dims"),
    ("swin_depths", "--swin-depths"),
    ("swin_heads", "--swin-heads"),
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
