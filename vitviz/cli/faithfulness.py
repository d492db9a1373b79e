"""``vitviz-cli faithfulness``: deletion and insertion curves of explanation methods on images,
and, where an image has a mask, how well each map lands on the object (DESIGN §5).

Writes OUT/faithfulness.json (``vitviz.explain.faithfulness.report``), OUT/faithfulness.csv
(one row per image × method) and OUT/faithfulness.png (the mean curves per method with their
AUCs); prints the summary table on stdout, progress on stderr. Exit status as ``explain``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitviz.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
    CliError,
    SubParsers,
    add_arch_options,
    add_model_code_options,
    add_prompt_options,
    load_for,
    make_out_folder,
)
from vitviz.cli.engine_options import add_engine_options, check_engine_options, engine_inputs
from vitviz.cli.method_options import (
    add_method_options,
    choose_methods,
    has_head,
    method_params,
    not_applicable,
    parse_param_options,
    table_for,
)
from vitviz.cli.pass_progress import passes_shown
from vitviz.cli.shared_options import (
    add_config_option,
    add_device_option,
    add_out_option,
    device_of,
)
from vitviz.core.console import say

if TYPE_CHECKING:
    from PIL import Image
    from torch import Tensor

    from vitviz.checkpoints import LoadedModel
    from vitviz.explain.faithfulness import ImageFaithfulness

FILES = ("faithfulness.json", "faithfulness.csv", "faithfulness.png")


def add_parser(subparsers: SubParsers) -> None:
    """Register ``faithfulness`` on the CLI's sub-parsers."""
    p = subparsers.add_parser(
        "faithfulness",
        help="deletion / insertion curves and AUCs per method; mass in mask and pointing game",
        description="Measure explanation methods by deleting patches from each image (most "
        "important first, by the method's map of the CLS query; on a Swin, of the average pool "
        "over the first stage's patches) and by inserting them into a blank input, and record "
        "the probability of the image's top class at each of --steps steps. With a mask "
        "(<stem>_mask.png beside the image, or in --masks DIR: white = the object) also the "
        "share of each map's mass inside the mask and whether its maximum lies inside. Writes "
        "OUT/faithfulness.json, OUT/faithfulness.csv, OUT/faithfulness.png.",
    )
    p.add_argument(
        "images",
        nargs="+",
        type=Path,
        help="image files or folders of them (the images directly in a folder; the inputs "
        "that are another input's <stem>_mask.png are used as its mask)",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        help="checkpoint file (with --model-code: the model's state dict, optional)",
    )
    add_config_option(p)
    add_arch_options(p)
    add_device_option(p)
    add_method_options(p, "default: every method that applies to the model")
    p.add_argument(
        "--steps", type=int, default=20, help="steps S of each curve (p_0 … p_S; default 20)"
    )
    p.add_argument(
        "--batch-size", type=int, default=64, help="perturbed images per forward pass (64)"
    )
    p.add_argument(
        "--masks", type=Path, help="folder of <stem>_mask.png files (default: beside each image)"
    )
    add_out_option(p, "vitviz-faithfulness")
    add_model_code_options(p)
    add_prompt_options(p)
    add_engine_options(p)
    p.set_defaults(func=cmd_faithfulness)


def cmd_faithfulness(args: argparse.Namespace) -> int:
    from vitviz.cli.explain_batch import expand_images

    if args.steps < 1:
        raise CliError(f"--steps must be a whole number of at least 1, got {args.steps}")
    if args.batch_size < 1:
        raise CliError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.masks is not None and not args.masks.is_dir():
        raise CliError(f"--masks {args.masks}: not a folder (it should hold <stem>_mask.png)")
    check_engine_options(args)
    images = without_masks(expand_images(engine_inputs(args, args.images)), args.masks)
    device = device_of(args)
    loaded = load_for(args)
    loaded.model.to(device)
    if not has_head(loaded):
        raise CliError(
            "faithfulness needs a model with a classification head (it follows the "
            "probability of the top class), and this model has none"
        )
    table = table_for(loaded)  # the options checked in one pass against it
    methods = choose_methods(args.methods, table)
    left_out = {} if methods else not_applicable(table)  # said once the options are good
    methods = methods or [m for m in table.usable if m.map_kind == "scalar"]  # no colours
    names = [m.name for m in methods]
    given = parse_param_options(args.params, table)
    params = method_params(methods, given, {}, table)
    make_out_folder(args.out)
    for name, why in left_out.items():
        say(f"vitviz-cli: {name} not measured: {why}")
    n = len(images)
    if args.engine == "ray":  # the same per-image work (measure_image) on Ray's workers (DESIGN §7)
        from vitviz.cli.on_ray import faithfulness_on_ray

        results = faithfulness_on_ray(args, names, params, images, measure_image)
    else:
        results = _measure_here(args, loaded, images, names, params)
    if not results:
        return EXIT_FAILED
    written = write_outputs(results, args.out)
    print(summary_markdown(results))
    say(f"-> {', '.join(str(p) for p in written)}")
    return EXIT_PARTIAL if len(results) < n else EXIT_OK


def _measure_here(
    args: argparse.Namespace,
    loaded: LoadedModel,
    images: Sequence[Path],
    names: list[str],
    params: dict[str, Any],
) -> list[ImageFaithfulness]:
    """The local engine: each image measured in this process, in order (its record in
    run.json and images.parquet, as on Ray: ``vitviz.cluster.record``)."""
    from vitviz.cli.on_ray import faithfulness_record
    from vitviz.cluster.job import Outcome
    from vitviz.cluster.record import LocalRunFiles
    from vitviz.explain.localisation import mask_path_for

    results = []
    n = len(images)
    with LocalRunFiles(args.out, "faithfulness", say, n, names) as files:
        for i, path in enumerate(images):
            try:
                with passes_shown(path.name):
                    result, probs = measure_image(loaded, path, names, params, args)
            except _SkippedError as exc:
                say(f"vitviz-cli: skipped {path}: {exc}")
                files.add(Outcome(i, str(path), None, str(exc)))
                continue
            results.append(result)
            files.add(Outcome(i, str(path), faithfulness_record(result, probs)))
            c = result.target_class
            said = f"{loaded.class_names[c]} ({float(probs[c]):.1%})"
            mask_file = mask_path_for(path, args.masks)
            masked = f", mask {mask_file.name}" if mask_file is not None else ", no mask"
            say(f"[{i + 1}/{n}] {path.name}: {said}{masked}, {len(names)} methods measured")
    return results


class _SkippedError(Exception):
    """One image that can't be measured (its message says why); the others go on."""


def _mask(path: Path, geometry: Any, masks: Path | None) -> Any:
    """The image's (gh, gw) patch mask, or None without one; _SkippedError for a bad mask."""
    from vitviz.explain.localisation import mask_grid_for, mask_path_for
    from vitviz.imaging import ImageLoadError

    try:
        return mask_grid_for(path, geometry, masks)
    except (ImageLoadError, ValueError) as exc:
        raise _SkippedError(f"its mask {mask_path_for(path, masks)}: {exc}") from exc


def measure_image(
    loaded: LoadedModel,
    path: Path,
    names: list[str],
    params: dict[str, Any],
    args: argparse.Namespace,
) -> tuple[ImageFaithfulness, Tensor]:
    """One image through its kind's ``analyze`` and ``evaluate_methods``, with the image's
    mask: (result, probabilities)."""
    from vitviz.core.errors import VitvizError
    from vitviz.explain.faithfulness import evaluate_methods
    from vitviz.imaging import ImageLoadError

    try:
        analysis = loaded.kind.analyze(loaded, path, gradients=True)
    except (ImageLoadError, VitvizError, ValueError) as exc:
        raise _SkippedError(str(exc)) from exc
    mask = _mask(path, analysis.geometry, args.masks)
    try:
        result = evaluate_methods(
            analysis,
            names=names,
            steps=args.steps,
            batch_size=args.batch_size,
            params=params,
            mask=mask,
            name=str(path),
            target_class=getattr(args, "target_class", None),
        )
    except ValueError as exc:
        raise _SkippedError(str(exc)) from exc
    return result, analysis.probs


def without_masks(images: Sequence[Path], masks: Path | None) -> list[Path]:
    """The inputs less those that are another input's mask (so `samples/*.png` measures the
    images and uses their masks); how many were dropped is said on stderr."""
    from vitviz.explain.localisation import mask_path_for

    def key(p: Path) -> Path:
        return p.resolve()

    used = {key(m): p for p in images if (m := mask_path_for(p, masks)) is not None}
    kept = [p for p in images if key(p) not in used or key(used[key(p)]) == key(p)]
    dropped = len(images) - len(kept)
    if dropped:
        say(f"vitviz-cli: {dropped} of the inputs are masks of the others: used as masks")
    if not kept:
        raise CliError("no image to measure: every input is the mask of another")
    return kept


# -- the files -------------------------------------------------------------------------------------


def write_outputs(results: Sequence[ImageFaithfulness], folder: Path) -> list[Path]:
    """faithfulness.json, .csv and .png in ``folder``, each written atomically."""
    from vitviz.checkpoints.atomic import atomic_path
    from vitviz.explain.faithfulness import csv_rows, report
    from vitviz.imaging.overlay import save_png

    json_path, csv_path, png_path = (folder / name for name in FILES)
    text = json.dumps(report(results), indent=2)
    with atomic_path(json_path) as tmp:
        Path(tmp).write_text(text + "\n", encoding="utf-8")
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(csv_rows(results))
    with atomic_path(csv_path) as tmp:
        Path(tmp).write_text(buffer.getvalue(), encoding="utf-8")
    save_png(figure(results), png_path)
    return [json_path, csv_path, png_path]


def mean_curves(results: Sequence[ImageFaithfulness], name: str) -> tuple[list[float], list[float]]:
    """The mean over images of p_k, for deletion and for insertion."""
    curves = [r.methods[name] for r in results if name in r.methods]
    deletion = [sum(v) / len(curves) for v in zip(*(c.deletion for c in curves), strict=True)]
    insertion = [sum(v) / len(curves) for v in zip(*(c.insertion for c in curves), strict=True)]
    return deletion, insertion


def _number(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}"


def _rows(results: Sequence[ImageFaithfulness]) -> tuple[list[str], list[list[str]]]:
    """Header and one row per method of the summary: AUCs, and localisation with masks."""
    from vitviz.explain.faithfulness import summary

    table = summary(results)
    masked = any("mass_in_mask" in s for s in table.values())
    header = ["method", "deletion AUC ↓", "insertion AUC ↑"]
    if masked:
        header += ["mass in mask ↑", "pointing game ↑"]
    rows = []
    for name, s in table.items():
        row = [name, _number(s["deletion_auc"]), _number(s["insertion_auc"])]
        if masked:
            row += [_number(s.get("mass_in_mask")), _number(s.get("pointing_game"))]
        rows.append(row)
    return header, rows


def summary_markdown(results: Sequence[ImageFaithfulness]) -> str:
    """The summary over the images as a Markdown table (what docs/methods.md shows)."""
    header, rows = _rows(results)
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join([f"`{r[0]}`", *r[1:]]) + " |" for r in rows]
    return "\n".join(lines)


def figure(results: Sequence[ImageFaithfulness]) -> Image.Image:
    """Deletion and insertion panels of the mean curves per method, and a legend with the
    mean AUCs (and the localisation numbers with masks)."""
    from vitviz.imaging.curves import GREY, PALETTE, Curve, LegendRow, Panel, curves_figure

    header, rows = _rows(results)
    header = [h.replace(" ↓", "").replace(" ↑", "") for h in header]
    deletion, insertion, legend = [], [], []
    hue = 0
    for row in rows:
        name = row[0]
        baseline = name == "random"  # the baseline: grey, dashed
        colour = GREY if baseline else PALETTE[hue % len(PALETTE)]
        dashed = baseline or hue >= len(PALETTE)  # more methods than hues: dashed too
        hue += not baseline
        d, ins = mean_curves(results, name)
        deletion.append(Curve(d, colour, dashed))
        insertion.append(Curve(ins, colour, dashed))
        legend.append(LegendRow(colour, row, dashed))
    steps = results[0].steps
    images = len(results)
    y = "p(top class)"
    panels = [
        Panel("Deletion (lower AUC is better)", "share of patches deleted", y, deletion),
        Panel("Insertion (higher AUC is better)", "share of patches inserted", y, insertion),
    ]
    subtitle = (
        f"mean over {images} image{'s' if images != 1 else ''}, {steps} steps; patches in "
        "the order of each method's map, most important first"
    )
    return curves_figure(panels, header, legend, "Faithfulness", subtitle)
