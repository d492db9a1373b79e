"""``vitviz-cli ablate IMAGE... --checkpoint C --out OUT``: every head's effect on the predicted
(or chosen) class, each head knocked out alone (DESIGN §5, "Interventions"):
``OUT/<stem>_ablation.npz`` (``head_effect`` (L, H), ``head_effect_prob``, ``target_class``,
``logits``, ``mode``) and ``OUT/<stem>_ablation.png``; over several images also
``OUT/ablation_summary.npz`` and ``.png`` (the effects' mean and standard deviation)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitviz.cli.ablate_work import ablate_image, write_summary
from vitviz.cli.common import EXIT_FAILED, EXIT_OK, EXIT_PARTIAL, SubParsers, make_out_folder
from vitviz.cli.engine_options import add_engine_options, check_engine_options, engine_inputs
from vitviz.cli.head_effect_options import add_model_options, add_run_options, open_model
from vitviz.core.console import say


def add_parser(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "ablate",
        help="each head's effect on the prediction, knocked out alone: .npz and a grid PNG",
        description="For each image: y_c(full) - y_c(head knocked out) for every layer and head "
        "(c: the top prediction or --class; a CLIP's prompt), and the probabilities' change. "
        "Folders: each image, and the mean and standard deviation over them.",
    )
    p.add_argument("images", nargs="+", type=Path, help="image files or folders of them")
    add_model_options(p)
    p.add_argument(
        "--ablation",
        default="zero",
        choices=("zero", "mean"),
        help="a knocked-out head's output becomes 0 (default), or its mean over the image's tokens",
    )
    add_run_options(p, "vitviz-ablate")
    add_engine_options(p)
    p.set_defaults(func=cmd_ablate, model_code=None, model_args=None)


def cmd_ablate(args: argparse.Namespace) -> int:
    from vitviz.cli.explain_batch import expand_images
    from vitviz.cli.on_ray import ablate_record
    from vitviz.cluster.job import Outcome
    from vitviz.cluster.record import LocalRunFiles
    from vitviz.core.errors import VitvizError
    from vitviz.pipeline.export import output_stem

    check_engine_options(args)
    images = expand_images(engine_inputs(args, args.images))
    loaded = open_model(args)
    make_out_folder(args.out)
    if args.engine == "ray":  # the same per-image work (ablate_image) on Ray's workers (DESIGN §7)
        from vitviz.cli.on_ray import ablate_on_ray

        return ablate_on_ray(args, images)
    names, grids, labels, failed = [], [], None, 0
    with LocalRunFiles(args.out, "ablate", say, len(images)) as files:  # run.json, as Ray's
        for i, path in enumerate(images):
            try:
                effects, labels = ablate_image(loaded, path, output_stem(path.stem), args)
            except (VitvizError, ValueError) as exc:
                say(f"vitviz-cli: skipped {path}: {exc}")
                files.add(Outcome(i, str(path), None, str(exc)))
                failed += 1
                continue
            files.add(Outcome(i, str(path), ablate_record(effects, labels)))
            names.append(path.name)
            grids.append(effects.effect.numpy())
            c = effects.target
            top = effects.effect.nan_to_num(float("-inf")).flatten().argmax()
            L, H = divmod(int(top), effects.effect.shape[1])
            stem = output_stem(path.stem)
            say(
                f"[{i + 1}/{len(images)}] {path.name}: {loaded.class_names[c]}; largest effect "
                f"head {L}.{H} ({float(effects.effect[L, H]):+.4g}) -> "
                f"{args.out / stem}_ablation.npz"
            )
    if not grids:
        return EXIT_FAILED
    write_summary(args, names, grids, labels or [])
    return EXIT_PARTIAL if failed else EXIT_OK
