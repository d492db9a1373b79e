"""``vitviz-cli explain`` for a Swin: per image the npz of issue 16 item 2 (``swin_arrays`` plus
``class_names``, ``input`` and ``map_<name>``) and ``<stem>_rollout.png`` (the windowed rollout
over the model input), plus ``<stem>_<name>.png`` for each other ``--method`` a Swin takes; all
written by ``vitviz.kinds.swin.output``, as the window's export does.

``--param METHOD.PARAMETER=VALUE`` and ``--fusion`` reach the Swin versions of the methods
(``swin_methods.SWIN_PARAMETERS``: rollout's fusion, attention's layer, i.e. block, and head); a
table parameter a Swin version does not take (discard ratio, start layer) is refused by name,
with the reason, never ignored."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vitviz.console import say
from vitviz.errors import VitvizError


class SwinCliError(VitvizError):
    """A ``--method`` or setting a Swin can't take (one line, exit 2)."""


def swin_methods_for(
    names: list[str] | None, has_head: bool, model: object | None = None
) -> list[str]:
    """The ``--method`` names besides rollout (always written), checked: one that can't run on
    a Swin is refused in one line naming why."""
    from vitviz.explain.methods import get_method
    from vitviz.kinds.swin.methods import swin_unavailable

    chosen = []
    for name in dict.fromkeys(names or ()):
        try:
            method = get_method(name)
        except ValueError as exc:
            raise SwinCliError(f"--method: {exc}") from exc
        reason = swin_unavailable(method.name, method.label, has_head, model)
        if reason is not None:
            raise SwinCliError(f"--method {name}: {reason}")
        if name != "rollout":
            chosen.append(name)
    return chosen


# explain's options that set the table parameter of every method having it, as for ViTs:
# (option, its attribute, the parameter, the option's default)
SHARED_OPTIONS = (
    ("--fusion", "fusion", "fusion", "mean"),
    ("--discard", "discard", "discard_ratio", 0.0),
    ("--start-layer", "start_layer", "start_layer", 0),
)


def swin_method_params(
    args: argparse.Namespace, names: list[str], model: Any
) -> dict[str, dict[str, Any]]:
    """{method: the values its Swin version takes} for rollout and ``names``, from ``--param``
    and the shared options (--fusion reaches the rollout). A ``--param``, ``--discard`` or
    ``--start-layer`` no method here takes on a Swin is refused in one line saying why."""
    from vitviz.cli.method_options import parse_param_options
    from vitviz.kinds.swin.methods import NOT_ON_SWIN, swin_parameter_refusal, swin_params

    computed = ["rollout", *names]
    given = parse_param_options(args.params)
    for method, values in given.items():
        if method not in computed:
            raise SwinCliError(
                f"--param {method}.{next(iter(values), '')}: {method} is not among the methods "
                f"computed here ({', '.join(computed)}); add --method {method}"
            )
        for name in values:
            why = swin_parameter_refusal(method, name)
            if why is not None:
                raise SwinCliError(f"--param {why}")
    shared = {}
    for option, attribute, name, default in SHARED_OPTIONS:
        value = getattr(args, attribute)
        if value == default:
            continue
        if not any(swin_parameter_refusal(m, name) is None for m in computed):
            why = NOT_ON_SWIN.get(name, f"no method computed here takes {name} on a Swin")
            raise SwinCliError(f"{option} {value} does not apply to a Swin: {why}")
        shared[name] = value
    cfg = model.config
    blocks, heads = int(cfg.depth), max(int(h) for h in cfg.heads)
    out = {}
    for method in computed:
        values = {k: v for k, v in shared.items() if swin_parameter_refusal(method, k) is None}
        values.update(given.get(method, {}))
        try:
            out[method] = swin_params(method, values, blocks, heads)
        except ValueError as exc:
            raise SwinCliError(
                f"--param {method}: {exc}; this Swin has {blocks} blocks of at most {heads} heads"
            ) from exc
    return out


def note_unused_options(args: argparse.Namespace) -> None:
    """One line on stderr for each of explain's ViT batch options given that a Swin's run does
    not use (it still runs: they change how, not what, is computed for a ViT)."""
    unused = (
        (args.batch_size is not None, f"--batch-size {args.batch_size}",
         "a Swin's images are analysed one at a time"),
        (args.attention_dtype != "float32", f"--attention-dtype {args.attention_dtype}",
         "a Swin's window attention is kept as the model computes it"),
        (args.full_size, "--full-size", "a Swin's map PNGs are drawn over the model input"),
    )  # fmt: skip
    for given, option, why in unused:
        if given:
            say(f"vitviz-cli: note: {option} is not used on a Swin: {why}")


def explain_swin(args: argparse.Namespace, loaded: Any, device: Any) -> int:
    """Every image of ``args.images`` through ``analyze_swin``; exit code as for ViTs."""
    from vitviz.cli.explain_batch import expand_images
    from vitviz.export import output_stem
    from vitviz.imaging import ImageLoadError
    from vitviz.kinds.swin.analysis import analyze_swin
    from vitviz.kinds.swin.output import (
        SwinMapSettings,
        swin_output_maps,
        write_swin_npz,
        write_swin_pngs,
    )

    classes = loaded.model.config.num_classes
    has_head = classes > 0
    c = args.target_class
    if c is not None and not 0 <= c < classes:
        raise SwinCliError(f"--class {c} is out of range: the model has {classes} classes")
    extra = swin_methods_for(args.methods, has_head, loaded.model)
    params = swin_method_params(args, extra, loaded.model)
    settings = SwinMapSettings(tuple(extra), params, args.target_class)
    images = expand_images(args.images)  # folders: the images in them, as for ViTs
    note_unused_options(args)
    loaded.model.to(device).eval()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for i, path in enumerate(images, 1):
        stem = output_stem(Path(path).stem)
        try:
            analysis = analyze_swin(
                loaded,
                path,
                gradients="gradient-rollout" in extra,
                target_class=args.target_class,
            )
        except (ImageLoadError, ValueError) as exc:
            say(f"vitviz-cli: skipped {path}: {exc}")
            failed += 1
            continue
        try:
            maps = swin_output_maps(analysis, loaded.model, settings)
        except ValueError as exc:  # e.g. attention.head beyond the chosen block's heads
            raise SwinCliError(str(exc)) from exc
        target = write_swin_npz(analysis, loaded.class_names, maps, args.out / f"{stem}.npz")
        write_swin_pngs(analysis, maps, args.out, stem, args.colormap)
        c = analysis.target_class
        names = loaded.class_names
        said = f"{names[c]} ({float(analysis.probs[c]):.1%})" if has_head else "no head"
        say(f"[{i}/{len(images)}] {Path(path).name}: {said} -> {target}")
    if failed == len(images):
        return 2
    return 1 if failed else 0
