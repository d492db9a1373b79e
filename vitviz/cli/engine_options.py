"""The engine options of ``explain``, ``stats`` and ``faithfulness`` (DESIGN §7): ``--engine
local`` (the default: this process, no Ray) or ``ray`` with ``--address``, ``--workers``,
``--gpus-per-worker``, ``--recursive`` and ``--resume``. Nothing here imports Ray."""

from __future__ import annotations

import argparse

from vitviz.cli.common import CliError

ENGINES = ("local", "ray")
RAY_ONLY = ("address", "workers", "gpus_per_worker", "recursive", "resume")


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """The engine's options on a sub-command that analyses many images."""
    g = p.add_argument_group("engine (docs/cluster.md)")
    g.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local: this process (default); ray: actors on a Ray cluster, each holding one "
        "model (pip install 'vitviz[cluster]')",
    )
    g.add_argument(
        "--address",
        default=None,
        help="the Ray cluster to join: auto, or ray://host:port (default: start a local Ray "
        "sized to this machine, stopped at the end)",
    )
    g.add_argument("--workers", type=int, default=None, metavar="N", help="actors, one model each")
    g.add_argument(
        "--gpus-per-worker", type=float, default=None, metavar="G", help="GPUs per actor (0)"
    )
    g.add_argument(
        "--recursive", action="store_true", help="the images of sub-folders too (--engine ray)"
    )
    g.add_argument(
        "--resume",
        action="store_true",
        help="skip the images a previous run into the same --out finished (--engine ray)",
    )


def check_engine_options(args: argparse.Namespace) -> None:
    """CliError for an engine option that can't be used: a Ray option with the local engine,
    fewer than one worker, a negative GPU share."""
    if args.engine != "ray":
        given = [n for n in RAY_ONLY if getattr(args, n, None) not in (None, False)]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise CliError(f"{flag} is an option of --engine ray")
        return
    from vitviz.cluster.ray_engine import RayMissingError, import_ray

    try:
        import_ray()  # said before anything opens
    except RayMissingError as exc:
        raise CliError(str(exc)) from exc
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be at least 1, got {args.workers}")
    if args.gpus_per_worker is not None and args.gpus_per_worker < 0:
        raise CliError(f"--gpus-per-worker must be 0 or more, got {args.gpus_per_worker}")


def ray_options(args: argparse.Namespace, images_per_task: int) -> object:
    """The RayOptions of the arguments (``vitviz.cluster.ray_engine``, imported here)."""
    from vitviz.cluster.ray_engine import RayOptions

    return RayOptions(
        address=args.address,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker or 0.0,
        images_per_task=images_per_task,
    )


def engine_inputs(args: argparse.Namespace, inputs: list) -> list:
    """The images of ``inputs`` for ``--engine ray`` (folders, ``--recursive``, globs, lists of
    paths: ``vitviz.cluster.inputs``); for the local engine ``inputs`` as given."""
    if args.engine != "ray":
        return inputs
    from vitviz.cluster.inputs import InputError, expand_inputs

    try:
        return expand_inputs(inputs, args.recursive)
    except InputError as exc:
        raise CliError(str(exc)) from exc
