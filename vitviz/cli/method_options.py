"""The method table's options on the command line: ``--method`` / ``--param`` of ``explain`` and
``faithfulness``, and choosing the methods and their parameters for a model.

The checks themselves are ``vitviz.explain.method_choice``'s (one pass against the table); here
their refusals become the CLI's one-line error. No method is named in this file.
``--param METHOD.PARAMETER=VALUE`` sets one parameter of one method (repeatable), e.g.
``--param rollout.discard_ratio=0.2 --param attention.layer=3``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from vitviz.cli.common import CliError

if TYPE_CHECKING:  # the table imports torch: only when a command runs, not to parse arguments
    from vitviz.checkpoints import LoadedModel
    from vitviz.explain.methods import Method, TableView
    from vitviz.pipeline.export import MapSettings

PARAM_FORM = "METHOD.PARAMETER=VALUE"  # as vitviz.explain.method_choice reads it


def add_method_options(p: argparse.ArgumentParser, default: str) -> None:
    """``--method NAME…`` (repeatable) and ``--param METHOD.PARAMETER=VALUE`` (repeatable)."""
    p.add_argument(
        "--method",
        dest="methods",
        action="extend",
        nargs="+",
        metavar="NAME",
        default=None,
        help=f"explanation method(s), repeatable; `vitviz-cli methods` lists them ({default})",
    )
    p.add_argument(
        "--param",
        dest="params",
        action="append",
        metavar=PARAM_FORM,
        default=None,
        help="one parameter of one method, repeatable, e.g. rollout.discard_ratio=0.2 or "
        "attention.layer=3 (`vitviz-cli methods` lists the parameters)",
    )


# -- choosing methods and their parameters ---------------------------------------------------------


@contextmanager
def _said() -> Iterator[None]:
    """The table's OptionRefusedError as the CLI's one-line error."""
    from vitviz.explain.method_choice import OptionRefusedError

    try:
        yield
    except OptionRefusedError as exc:
        raise CliError(str(exc)) from exc


def has_head(loaded: LoadedModel) -> bool:
    from vitviz.explain.method_choice import has_head

    return has_head(loaded)


def table_for(loaded: LoadedModel, layers: tuple[int, ...] | None = None) -> TableView:
    """The method table as ``loaded``'s model reads it keeping the model layers ``layers``
    (None: every layer): asked once, with the kind the model carries."""
    from vitviz.explain.method_choice import table_for

    return table_for(loaded, layers)


def not_applicable(table: TableView) -> dict[str, str]:
    """{name: why} of the table's methods that can't run on the model."""
    return {name: why for name, why in table.unavailable.items() if why is not None}


def choose_methods(names: Sequence[str] | None, table: TableView) -> tuple[Method, ...]:
    """The methods of ``--method`` checked against the table; CliError naming the methods that
    apply otherwise (``vitviz.explain.method_choice.choose_methods``)."""
    from vitviz.explain import method_choice

    with _said():
        return method_choice.choose_methods(names, table)


def parse_param_options(texts: Sequence[str] | None, table: TableView) -> dict[str, dict[str, Any]]:
    """``--param`` texts -> {method: {parameter: typed value}}; CliError naming the option
    otherwise (``vitviz.explain.method_choice.parse_param_options``)."""
    from vitviz.explain import method_choice

    with _said():
        return method_choice.parse_param_options(texts, table)


def method_params(
    methods: Iterable[Method],
    params: Mapping[str, Mapping[str, Any]],
    shared: Mapping[str, Any],
    table: TableView,
) -> dict[str, dict[str, Any]]:
    """{method: the value of each parameter the kind's version takes}; CliError for a refused
    one (``vitviz.explain.method_choice.method_params``)."""
    from vitviz.explain import method_choice

    with _said():
        return method_choice.method_params(methods, params, shared, table)


def map_settings(args: argparse.Namespace, loaded: LoadedModel) -> MapSettings:
    """explain's MapSettings from its options: --method, --param, and --fusion, --discard,
    --start-layer for every map computed whose version takes that parameter (today's maps
    included), all checked in one pass against the table as the model reads it keeping the
    layers of --layers (``args.kept_layers``, parsed)."""
    from vitviz.explain.method_choice import SHARED_OPTIONS, choose_maps
    from vitviz.pipeline.export import LEGACY_MAPS, MapSettings

    options = {attribute: getattr(args, attribute) for _o, attribute, _p, _d in SHARED_OPTIONS}
    always = [name for _key, name in LEGACY_MAPS]  # today's maps, where they apply
    with _said():
        methods, params = choose_maps(
            loaded, getattr(args, "kept_layers", None), args.methods, args.params, options, always
        )
    return MapSettings(
        args.fusion,
        args.discard,
        args.start_layer,
        args.target_class,
        methods=tuple(m.name for m in methods),
        params=params,
    )
