"""What every vitviz-cli sub-command shares: exit statuses, the one-line error, the model options
(--checkpoint's --config / --arch / --heads, --model-code / --model-args) and opening the model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TypeAlias

EXIT_OK, EXIT_PARTIAL, EXIT_FAILED = 0, 1, 2


ASSUMPTION_PREFIXES = ("assumed", "recognised as")

# What ``parser.add_subparsers()`` returns: each sub-command module adds its parser to it.
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CliError(Exception):
    """A user mistake the CLI reports in one line and exits 2 for."""


def add_model_code_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model-code",
        metavar="FILE.py:NAME",
        help="open a model written in a Python file (it runs with your rights): its "
        "class or factory NAME; --config may give image_size, mean, std, patch_size, "
        "num_prefix_tokens, class_names",
    )
    p.add_argument(
        "--model-args",
        metavar="JSON",
        help="keyword arguments of NAME as a JSON object (or @file.json), e.g. '{\"dim\": 64}'",
    )


def add_prompt_options(p: argparse.ArgumentParser) -> None:
    """--prompt / --prompts / --template: the classes of a CLIP-style model, typed."""
    p.add_argument(
        "--prompt",
        dest="prompt_texts",
        action="append",
        metavar="TEXT",
        help="a prompt (repeatable): a CLIP-style model scores the image against each, and "
        "the maps explain the top one (or --class N, 0-based in the order given)",
    )
    p.add_argument("--prompts", type=Path, metavar="FILE", help="prompts, one per line")
    p.add_argument(
        "--template",
        metavar='"a photo of a {}"',
        help="each prompt is written into this text at {}",
    )
    p.add_argument(
        "--target",
        metavar="TEXT",
        help="the prompt the maps (and faithfulness) explain, as typed (default: the top one)",
    )


def read_prompts(args: argparse.Namespace, templated: bool = True) -> list[str]:
    """The prompts of --prompts FILE then --prompt, through --template (none: [])."""
    texts: list[str] = []
    if getattr(args, "prompts", None) is not None:
        try:
            lines = args.prompts.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"--prompts {args.prompts}: cannot read it ({exc})") from exc
        texts += [line.strip() for line in lines if line.strip()]
    texts += [t for t in (getattr(args, "prompt_texts", None) or []) if t.strip()]
    template = getattr(args, "template", None) if templated else None
    if template is not None:
        if template.count("{}") != 1:
            raise CliError(
                f'--template must hold {{}} once, e.g. "a photo of a {{}}": {template!r}'
            )
        texts = [template.replace("{}", t) for t in texts]
    if template is not None and not texts:
        raise CliError("--template needs prompts (--prompt TEXT or --prompts FILE)")
    return texts


def read_prompt_options(args: argparse.Namespace) -> tuple[list[str], int | None]:
    """The prompts given (through --template) and the index of the one --target names (None:
    no --target), read and checked before the model opens; CliError naming the option."""
    prompts = read_prompts(args)
    target = getattr(args, "target", None)
    if target is None:
        return prompts, None
    typed = read_prompts(args, templated=False)
    if target not in typed and target not in prompts:
        raise CliError(f"--target {target!r} is none of the prompts given")
    return prompts, (typed if target in typed else prompts).index(target)


def apply_prompts(
    args: argparse.Namespace, loaded: Any, prompts: list[str], target: int | None
) -> Any:
    """The prompts given become the model's classes through its kind (the one it carries);
    one line when it takes none (a ViT's classes are its head's). --target sets the class."""
    if prompts:
        why = loaded.kind.apply_prompts(loaded, prompts)
        if why is not None:
            raise CliError(f"--prompt: {why}")
    if target is not None:
        args.target_class = target
    return loaded


def load_for(args: argparse.Namespace) -> Any:
    """The model of --model-code, else of the checkpoint argument (with the prompts given,
    read before it opens)."""
    config = read_config(args.config)  # both ways read it, before anything opens
    if args.model_code is None:
        if args.model_args is not None:
            raise CliError("--model-args needs --model-code FILE.py:NAME")
        if args.checkpoint is None:
            raise CliError("give a checkpoint (or --model-code FILE.py:NAME)")
        prompts, target = read_prompt_options(args)
        return apply_prompts(args, open_checkpoint(args.checkpoint, config, args), prompts, target)
    from vitviz.modelcode import (
        ModelCodeError,
        load_model_code,
        make_spec,
        parse_args_text,
        parse_target,
    )

    try:
        file, name = parse_target(args.model_code)
        arguments = parse_args_text(args.model_args)
        spec = make_spec(file, name, arguments, args.checkpoint, config)
        return load_model_code(spec)
    except ModelCodeError as exc:
        raise CliError(str(exc)) from exc


def add_arch_options(p: argparse.ArgumentParser) -> None:
    """--arch and --heads: what a bare state dict's weights can't say."""
    p.add_argument(
        "--arch",
        metavar="NAME",
        help="the timm architecture of the weights (a timm model name, e.g. "
        "vit_base_patch16_clip_224): its heads, norm eps, activation and pooling",
    )
    p.add_argument("--heads", type=int, metavar="N", help="attention heads per layer")
    add_hub_options(p)


def add_hub_options(p: argparse.ArgumentParser) -> None:
    """--offline: a model id opens from the Hugging Face cache only (as HF_HUB_OFFLINE=1)."""
    p.add_argument(
        "--offline",
        action="store_true",
        help="never download: a model id (org/name) opens only from the Hugging Face cache",
    )


def resolve_checkpoint(path: Path, args: argparse.Namespace | None = None) -> Path:
    """What opens for ``path``: the path itself, or a model id's snapshot from the Hugging Face
    cache, downloaded when it isn't there (the size said first, a progress bar on stderr)."""
    from vitviz.checkpoints import CheckpointError
    from vitviz.checkpoints.hub_fetch import resolve_reference
    from vitviz.core.console import ProgressLine
    from vitviz.core.printable import byte_size

    bar = ProgressLine()

    def before(plan: Any) -> None:
        files = len(plan.choice.files)
        bar.start(
            f"vitviz-cli: downloading {plan.shown} ({files} file{'s' * (files != 1)}, "
            f"{byte_size(plan.choice.total)}) into {plan.folder}"
        )

    try:
        return resolve_reference(
            path,
            offline=bool(getattr(args, "offline", False)) or None,
            progress=bar.update,
            before=before,
        )
    except CheckpointError as exc:
        raise CliError(str(exc)) from exc
    finally:
        bar.finish()


def load(path: Path, config_path: Path | None, args: argparse.Namespace | None = None) -> Any:
    return open_checkpoint(path, read_config(config_path), args)


def open_checkpoint(
    path: Path, config: dict[str, Any] | None, args: argparse.Namespace | None = None
) -> Any:
    """The checkpoint ``path`` opened with the --config settings ``config`` (read already) and
    --arch / --heads over them."""
    from vitviz.checkpoints import CheckpointError, load_checkpoint

    config = with_arch_options(config, args)
    target = resolve_checkpoint(path, args)
    try:
        return load_checkpoint(target, config=config)
    except CheckpointError as exc:
        raise CliError(str(exc) + heads_flag_advice(exc, args)) from exc


def heads_flag_advice(exc: Exception, args: argparse.Namespace | None) -> str:
    """For a refusal that lacks the head count, on a command that takes --heads: the flag that
    settles it too (settings.md: the CLI names the flags and keys)."""
    from vitviz.checkpoints.errors import MissingSettingsError

    fields = getattr(exc, "fields", {}) if isinstance(exc, MissingSettingsError) else {}
    if "heads" not in fields or not hasattr(args, "heads"):
        return ""
    return f" On the command line: --heads {fields['heads']}."


def with_arch_options(
    config: dict[str, Any] | None, args: argparse.Namespace | None
) -> dict[str, Any] | None:
    """--arch / --heads over the --config settings."""
    given = {
        key: value for key in ("arch", "heads") if (value := getattr(args, key, None)) is not None
    }
    if not given:
        return config
    if "heads" in given and given["heads"] < 1:
        raise CliError(f"--heads must be at least 1, got {given['heads']}")
    return {**(config or {}), **given}


def read_config(config_path: Path | None) -> dict[str, Any] | None:
    """--config FILE: a JSON object of model settings (they win over <checkpoint>.vitviz.json)."""
    if config_path is None:
        return None
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"--config {config_path}: not a readable JSON file ({exc})") from exc
    if not isinstance(config, dict):
        raise CliError(f'--config {config_path}: must hold a JSON object, e.g. {{"heads": 4}}')
    return config


def make_out_folder(out: Path) -> None:
    """Create ``--out`` (and its parents); CliError naming it when that can't be done."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or exc
        raise CliError(f"--out {out}: cannot create the output folder ({why})") from exc


def no_images(folder: Path) -> CliError:
    """The one line for an input folder without images directly in it: what is read, and its
    sub-folders that hold images (not read: the advice names them)."""
    from vitviz.imaging.loading import ACCEPTED, list_images

    try:
        subs = sorted(d for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
        full = [d for d in subs[:20] if list_images(d)]
    except OSError:
        full = []
    where = ""
    if full:
        more = ", …" if len(full) > 3 else ""
        named = ", ".join(str(d) for d in full[:3])
        where = f"; its sub-folders are not read: give one of them ({named}{more})"
    return CliError(f"{folder}: the folder holds no images directly in it{where}. {ACCEPTED}.")
