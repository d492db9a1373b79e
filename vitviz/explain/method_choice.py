"""A command line's method options checked against the method table in one pass (DESIGN §5):
``--method``, ``--param METHOD.PARAMETER=VALUE`` and the shared options (--fusion, --discard,
--start-layer) read against one ``TableView`` of the model, each refusal one sentence naming the
option (``OptionRefusedError``; the CLI says it as its one-line error).

Everything here reads ``vitviz.explain.methods``; no method is named in this file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vitviz.explain.methods import Method, TableView, get_method, table_view

PARAM_FORM = "METHOD.PARAMETER=VALUE"

# the options that set the table parameter of every method having it:
# (option, its attribute, the parameter, the option's default)
SHARED_OPTIONS = (
    ("--fusion", "fusion", "fusion", "mean"),
    ("--discard", "discard", "discard_ratio", 0.0),
    ("--start-layer", "start_layer", "start_layer", 0),
)


class OptionRefusedError(ValueError):
    """An option the model's table refuses: the sentence names the option and why."""


def has_head(loaded: Any) -> bool:
    """Whether ``loaded`` (a LoadedModel) has a classifier head with its class names."""
    n = int(getattr(loaded.model.config, "num_classes", 0))
    return n > 0 and len(loaded.class_names) == n


def table_for(loaded: Any, layers: tuple[int, ...] | None = None) -> TableView:
    """The method table as ``loaded``'s model reads it keeping the model layers ``layers``
    (None: every layer): asked once, with the kind the model carries; the options are checked
    against it in one pass."""
    return table_view(loaded.kind, loaded.model, has_head(loaded), layers)


def _method(table: TableView, name: str) -> Method:
    """The table's entry ``name``; the table's ValueError (listing the names) otherwise."""
    if name in table.methods:
        return table.methods[name]
    return get_method(name)  # raises: not in the table


def choose_methods(names: Sequence[str] | None, table: TableView) -> tuple[Method, ...]:
    """The methods of ``--method`` (in order, each once), checked against the model and the
    layers kept (``--layers``, the table's ``layers``); OptionRefusedError naming the methods that
    apply otherwise. None or empty: no method."""
    chosen: list[Method] = []
    for name in dict.fromkeys(names or ()):
        try:
            chosen.append(_method(table, name))
        except ValueError as exc:
            raise OptionRefusedError(f"--method: {exc}") from exc
    for m in chosen:
        reason = table.unavailable[m.name]
        if reason is not None:
            usable = ", ".join(u.name for u in table.usable) or "none"
            where = "these layers" if table.layers is not None else "this model"
            raise OptionRefusedError(f"--method {m.name}: {reason}; methods for {where}: {usable}")
    return tuple(chosen)


def parse_param_options(texts: Sequence[str] | None, table: TableView) -> dict[str, dict[str, Any]]:
    """``--param`` texts -> {method: {parameter: typed value}}, each parsed by its method's
    table entry; OptionRefusedError naming the option otherwise."""
    out: dict[str, dict[str, Any]] = {}
    for text in texts or ():
        key, sep, value = text.partition("=")
        name, dot, param = key.strip().partition(".")
        if not sep or not dot or not name or not param:
            raise OptionRefusedError(
                f"--param {text}: expected {PARAM_FORM}, e.g. rollout.discard_ratio=0.2"
            )
        try:
            method = _method(table, name)
            out.setdefault(name, {}).update(method.parse_params({param: value}))
        except ValueError as exc:
            raise OptionRefusedError(f"--param {text}: {exc}") from exc
    return out


def method_params(
    methods: Iterable[Method],
    params: Mapping[str, Mapping[str, Any]],
    shared: Mapping[str, Any],
    table: TableView,
) -> dict[str, dict[str, Any]]:
    """{method: the value of each parameter the kind's version takes} for ``methods``:
    ``shared`` values (e.g. --fusion) go to each method whose version takes a parameter of that
    name, ``params`` win over them; checked against the model's layers and heads (the table's
    ``bounds``), and a layer parameter against the layers kept (the table's ``layers``; None:
    every layer). OptionRefusedError for a --param of a method not computed, or one the kind's
    version does not take (with the reason)."""
    methods = tuple(methods)
    num_layers, num_heads = table.bounds
    names = {m.name for m in methods}
    for name, given in params.items():
        if name not in names:
            asked = ", ".join(m.name for m in methods)
            raise OptionRefusedError(
                f"--param {name}.{next(iter(given), '')}: {name} is not among the methods "
                f"computed here ({asked}); add --method {name}"
            )
    for name, given in params.items():
        for parameter in given:
            if parameter in table.refusals[name]:
                raise OptionRefusedError(f"--param {table.refusals[name][parameter]}")
    out = {}
    for m in methods:
        own = set(table.taken[m.name])
        values = {k: v for k, v in shared.items() if k in own}
        values.update(params.get(m.name, {}))
        try:
            out[m.name] = m.values_for(table.kind, values, num_layers, num_heads)
        except ValueError as exc:
            raise OptionRefusedError(
                f"{m.name}: {exc} (this model has {num_layers} layers of {num_heads} heads)"
            ) from exc
        if table.layers is not None:
            _check_layer_params(m, out[m.name], table.layers)
    return out


def _check_layer_params(m: Method, values: Mapping[str, Any], layers: tuple[int, ...]) -> None:
    """OptionRefusedError for a layer parameter (e.g. attention.layer) naming a layer not kept."""
    from vitviz.core.layers import layers_text

    for p in m.parameters:
        value = values.get(p.name)
        if p.per == "layer" and p.name == "layer" and value != -1 and value not in layers:
            raise OptionRefusedError(
                f"--param {m.name}.{p.name}={value}: layer {value} is not kept "
                f"(--layers keeps {layers_text(layers)}; -1 is the last of them)"
            )


def shared_values(
    options: Mapping[str, Any], computed: Sequence[Method], table: TableView
) -> dict[str, Any]:
    """{parameter: value} of --fusion, --discard and --start-layer (``options``: {attribute:
    value given}). One given (not its default) that no computed method's version takes on this
    kind is refused in one line with the reason (a Swin's rollout has no discard step), never
    ignored."""
    out = {}
    for option, attribute, name, default in SHARED_OPTIONS:
        value = options[attribute]
        out[name] = value
        if value == default:
            continue
        having = [m for m in computed if any(p.name == name for p in m.parameters)]
        if having and all(name in table.refused[m.name] for m in having):
            why = table.refused[having[0].name][name]
            raise OptionRefusedError(
                f"{option} {value} does not apply to a {table.kind.label}: {why}"
            )
    return out


def choose_maps(
    loaded: Any,
    layers: tuple[int, ...] | None,
    names: Sequence[str] | None,
    param_texts: Sequence[str] | None,
    options: Mapping[str, Any],
    always: Sequence[str],
) -> tuple[tuple[Method, ...], dict[str, dict[str, Any]]]:
    """The methods of ``--method`` and {method: parameter values} of every map computed (the
    ``always`` maps that apply, then those chosen), from ``--param`` texts and the shared
    ``options`` ({attribute: value} of SHARED_OPTIONS), all checked in one pass against the
    table as ``loaded``'s model reads it keeping ``layers`` (None: every layer)."""
    table = table_for(loaded, layers)
    methods = choose_methods(names, table)
    usable = {m.name for m in table.usable}
    today = [table.methods[name] for name in always if name in usable]
    computed = list({m.name: m for m in [*today, *methods]}.values())
    given = parse_param_options(param_texts, table)
    shared = shared_values(options, computed, table)
    depth = table.bounds[0]
    start_layer = options["start_layer"]
    if not 0 <= start_layer < depth:
        raise OptionRefusedError(
            f"--start-layer {start_layer} is out of range: the model has "
            f"{depth} layers (0..{depth - 1})"
        )
    return methods, method_params(computed, given, shared, table)
