"""``vitviz-cli explain``: images in, an .npz of every number and overlay PNGs out."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitviz.cli.ablate_options import ablated_analyses, add_ablate_options
from vitviz.cli.common import (
    ASSUMPTION_PREFIXES,
    CliError,
    SubParsers,
    add_arch_options,
    add_model_code_options,
    add_prompt_options,
    load_for,
)
from vitviz.cli.engine_options import add_engine_options, check_engine_options, engine_inputs
from vitviz.cli.explain_batch import add_batch_options, expand_images, explain_many, layers_option
from vitviz.cli.method_options import add_method_options, map_settings
from vitviz.cli.shared_options import (
    add_config_option,
    add_device_option,
    add_out_option,
    device_of,
)
from vitviz.core.console import say

if TYPE_CHECKING:
    from vitviz.pipeline.export import MapSettings


def add_parser(subparsers: SubParsers) -> None:
    """Register ``explain`` on the CLI's sub-parsers."""
    ex = subparsers.add_parser(
        "explain", help="analyse images: .npz of every number + overlay PNGs"
    )
    ex.add_argument(
        "images",
        nargs="+",
        type=Path,
        help="image files (PNG, JPEG, BMP, GIF, TIFF, WebP, PPM/PGM/PBM, ICO) or folders of them",
    )
    ex.add_argument(
        "--checkpoint",
        type=Path,
        help="checkpoint file (with --model-code: the model's state dict, optional; default: "
        "the model opened last in the window, else the shipped model)",
    )
    add_config_option(ex)
    add_arch_options(ex)
    add_device_option(ex)
    ex.add_argument(
        "--class",
        dest="target_class",
        type=int,
        default=None,
        help="class index to explain (default: the top prediction)",
    )
    ex.add_argument(
        "--fusion",
        default="mean",
        choices=("mean", "max", "min"),
        help="how rollout fuses the heads of a layer (default mean)",
    )
    ex.add_argument("--discard", type=float, default=0.0, help="rollout discard ratio in [0, 1)")
    ex.add_argument(
        "--start-layer",
        type=int,
        default=0,
        help="first layer rollout, gradient rollout and relevance use (default 0)",
    )
    add_method_options(
        ex, "default: today's maps only; each NAME adds npz key map_<name> and <stem>_<name>.png"
    )
    ex.add_argument(
        "--joint-pca",
        action="store_true",
        help="fit the pca map over all the run's images at once (DINOv2's figure: one "
        "colour per feature across images; a first pass through the model); needs --method pca",
    )
    ex.add_argument(
        "--colormap",
        default="viridis",
        help="colour map of the map PNGs: viridis (default), inferno, magma, jet, grey, coolwarm",
    )
    ex.add_argument(
        "--bare",
        action="store_true",
        help="map PNGs without title and colour bar (the overlay alone, at the image's size)",
    )
    add_out_option(ex, "vitviz-out")
    ex.add_argument(
        "--full-size",
        action="store_true",
        help="decode images and write overlays at their full size (default: at most 4096 px "
        "on the long side)",
    )
    add_model_code_options(ex)
    add_prompt_options(ex)
    add_batch_options(ex)
    add_ablate_options(ex)
    add_engine_options(ex)
    ex.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    """The options read and checked within the CLI in one pass (the images listed), the model
    opened, the options it decides checked against it, then the run."""
    check_explain_options(args)
    check_engine_options(args)
    if args.engine == "ray" and args.ablate:
        raise CliError("--ablate runs on the local engine only: leave out --engine ray")
    images = expand_images(engine_inputs(args, args.images))
    device = device_of(args)
    if args.checkpoint is None and args.model_code is None and args.model_args is None:
        args.checkpoint = _default_checkpoint()
    loaded = load_for(args)
    settings = model_settings(args, loaded, device)
    args.expanded_images = images
    check_joint_pca(args, settings)
    if args.engine == "ray":  # the same per-image work on Ray's workers (DESIGN §7)
        from vitviz.cli.on_ray import explain_on_ray

        del loaded
        return explain_on_ray(args, images, settings)
    intervened = ablated_analyses(args, loaded)  # None without --ablate
    return explain_many(args, loaded, images, settings, intervened)  # batches, a writer thread


def check_explain_options(args: argparse.Namespace) -> None:
    """CliError for an option wrong whatever the model: --discard, --colormap, --batch-size."""
    from vitviz.imaging.colormaps import COLORMAPS

    if not 0.0 <= args.discard < 1.0:
        raise CliError(f"--discard must be in [0, 1), got {args.discard}")
    if args.colormap not in COLORMAPS:
        raise CliError(f"--colormap must be one of {', '.join(COLORMAPS)}")
    if args.batch_size is not None and args.batch_size < 1:
        raise CliError(f"--batch-size must be at least 1, got {args.batch_size}")


def check_joint_pca(args: argparse.Namespace, settings: MapSettings) -> None:
    """CliError for --joint-pca without the pca map, or on Ray (its fit sees every image)."""
    if not getattr(args, "joint_pca", False):
        return
    from vitviz.pipeline.joint_pca import JOINT_METHOD

    if JOINT_METHOD not in settings.methods:
        raise CliError(f"--joint-pca colours the {JOINT_METHOD} map: add --method {JOINT_METHOD}")
    if args.engine == "ray":
        raise CliError("--joint-pca runs on the local engine only: leave out --engine ray")


def model_settings(args: argparse.Namespace, loaded: Any, device: Any) -> MapSettings:
    """The options the opened model decides, checked against it (what the weights could not
    say said first; --layers, --class, then the method table's options in one pass); the model
    on ``device`` in eval mode. Sets ``args.kept_layers`` (--layers parsed)."""
    for note in loaded.notes:  # what the weights could not say comes first
        if note.startswith(ASSUMPTION_PREFIXES):
            say(f"vitviz-cli: {note}")
    kind = loaded.kind
    unused = kind.unused_options()
    if args.layers is not None and "layers" in unused:
        raise CliError(f"--layers {unused['layers']}")
    loaded.model.to(device).eval()
    classes = int(getattr(loaded.model.config, "num_classes", 0))
    if args.target_class is not None and not 0 <= args.target_class < classes:
        raise CliError(
            f"--class {args.target_class} is out of range: the model has "
            f"{classes} classes (0..{classes - 1})"
        )
    depth, _heads = kind.parameter_bounds(loaded.model)
    args.kept_layers = layers_option(args.layers, depth)
    return map_settings(args, loaded)


def _default_checkpoint() -> Path:
    """explain without --checkpoint: the model used last in the window, else the shipped one;
    one line on stderr says which and how to choose another."""
    from vitviz.core.last_model import choose_model

    choice = choose_model()
    if choice is None:
        raise CliError("give a checkpoint (or --model-code FILE.py:NAME)")
    say(
        f"vitviz-cli: no --checkpoint: using {choice.path} ({choice.why}); "
        "choose another with --checkpoint FILE"
    )
    return choice.path
