"""``vitviz-cli explain`` for a Swin: per image the npz of issue 16 item 2 (``swin_arrays`` plus
``class_names`` and ``input``) and ``<stem>_rollout.png`` (the windowed rollout over the model
input), plus ``<stem>_<name>.png`` for each other ``--method`` a Swin takes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from vitviz.console import say as _say
from vitviz.errors import VitvizError


class SwinCliError(VitvizError):
    """A ``--method`` or setting a Swin can't take (one line, exit 2)."""


def swin_methods_for(
    names: list[str] | None, has_head: bool, model: object | None = None
) -> list[str]:
    """The ``--method`` names besides rollout, checked: one that can't run on a Swin is refused
    in one line naming why."""
    from vitviz.explain.methods import get_method
    from vitviz.explain.swin_methods import swin_unavailable

    chosen = []
    for name in dict.fromkeys(names or ()):
        try:
            method = get_method(name)
        except ValueError as exc:
            raise SwinCliError(f"--method: {exc}") from exc
        reason = swin_unavailable(method.name, method.label, has_head, model)
        if reason is not None:
            raise SwinCliError(f"--method {name}: {reason}")
        if name not in ("rollout", "attention"):
            chosen.append(name)
    return chosen


def swin_npz_arrays(analysis: Any, class_names: list[str]) -> dict[str, np.ndarray]:
    """``swin_arrays`` plus the class names and the normalised model input (C, H, W)."""
    from vitviz.explain.swin_export import swin_arrays

    arrays = swin_arrays(analysis)
    arrays["class_names"] = np.array(class_names, dtype=str)
    arrays["input"] = analysis.input.detach().cpu().numpy().astype(np.float32)
    return arrays


def explain_swin(args: argparse.Namespace, loaded: Any, device: Any) -> int:
    """Every image of ``args.images`` through ``analyze_swin``; exit code as for ViTs."""
    from vitviz.checkpoints.atomic import atomic_path
    from vitviz.explain.swin_analysis import analyze_swin
    from vitviz.explain.swin_methods import swin_method_map
    from vitviz.export import output_stem
    from vitviz.imaging import ImageLoadError
    from vitviz.imaging.overlay import overlay_on_image, save_png

    classes = loaded.model.config.num_classes
    has_head = classes > 0
    c = args.target_class
    if c is not None and not 0 <= c < classes:
        raise SwinCliError(f"--class {c} is out of range: the model has {classes} classes")
    extra = swin_methods_for(args.methods, has_head, loaded.model)
    loaded.model.to(device).eval()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for i, path in enumerate(args.images, 1):
        stem = output_stem(Path(path).stem)
        try:
            analysis = analyze_swin(
                loaded,
                path,
                gradients="gradient-rollout" in extra,
                target_class=args.target_class,
            )
        except (ImageLoadError, ValueError) as exc:
            _say(f"vitviz-cli: skipped {path}: {exc}")
            failed += 1
            continue
        target = args.out / f"{stem}.npz"
        with atomic_path(target) as tmp, open(tmp, "wb") as f:
            np.savez(f, **swin_npz_arrays(analysis, list(loaded.class_names)))
        for name in ["rollout", *extra]:
            map_ = swin_method_map(analysis, loaded.model, name, None, args.target_class)
            picture = overlay_on_image(analysis.pixels, map_.numpy(), colormap=args.colormap)
            save_png(picture, args.out / f"{stem}_{name}.png")
        c = analysis.target_class
        names = loaded.class_names
        said = f"{names[c]} ({float(analysis.probs[c]):.1%})" if has_head else "no head"
        _say(f"[{i}/{len(args.images)}] {Path(path).name}: {said} -> {target}")
    if failed == len(args.images):
        return 2
    return 1 if failed else 0
