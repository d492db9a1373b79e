"""Which kinds run a method, and which parameters each takes, come from the method table and each
kind's one declaration (``METHODS``, ``CANNOT``; DESIGN §5): a parameter added to an entry reaches
every kind that runs it without a kind file edited, a kind-independent method runs on every kind
but those that say they can't, and the refusals are the table's sentences."""

from __future__ import annotations

import importlib

import pytest
import torch

from vitviz.explain.methods import (
    Method,
    all_methods,
    get_method,
    ignored_parameters,
    method_names,
    register_method,
    unregister_method,
)
from vitviz.explain.params import Parameter
from vitviz.kindapi import all_kinds, get_kind

SMOOTH = Parameter("smooth", float, 0.0, "Smoothing", range=(0.0, 1.0))
BUILTIN_KINDS = ("vit", "swin", "pyramid", "cait", "xcit", "clip")


@pytest.fixture
def rollout_with_smooth(monkeypatch: pytest.MonkeyPatch) -> Method:
    """The rollout entry with one more parameter, as a table edit would give it."""
    rollout = get_method("rollout")
    monkeypatch.setattr(rollout, "parameters", (*rollout.parameters, SMOOTH))
    return rollout


def test_a_parameter_added_to_an_entry_reaches_every_kind_that_runs_it(rollout_with_smooth):
    rollout = rollout_with_smooth
    running = [k for k in all_kinds() if rollout.implementation_for(k) is not None]
    assert {k.name for k in running} >= set(BUILTIN_KINDS)
    for kind in running:
        assert "smooth" in rollout.taken_parameters(kind), kind.name
        assert rollout.parameter_refusal(kind, "smooth") is None, kind.name
        layers, heads = 4, 2
        assert rollout.values_for(kind, {"smooth": 0.5}, layers, heads)["smooth"] == 0.5
        assert "smooth" not in ignored_parameters(kind).get("rollout", {})


def test_the_refusals_are_built_from_the_entry(rollout_with_smooth):
    """A parameter a kind's version refuses: the table's sentence naming the parameter, the
    kind, the kind's reason and what the version takes now (the new parameter included)."""
    rollout = rollout_with_smooth
    why = rollout.parameter_refusal(get_kind("swin"), "discard_ratio")
    assert why == (
        "rollout.discard_ratio does not apply to a Swin Transformer: the windowed rollout of a "
        "Swin has no discard step (it keeps every entry of each window); its rollout takes "
        "fusion, smooth"
    )
    assert tuple(ignored_parameters(get_kind("pyramid"))["rollout"]) == (
        "discard_ratio",
        "start_layer",
    )
    cait = ignored_parameters(get_kind("cait"))["rollout"]
    assert tuple(cait) == ("discard_ratio",)
    assert cait["discard_ratio"] == get_kind("cait").implementation("rollout").refusal(
        "discard_ratio"
    )
    assert ignored_parameters(get_kind("vit")) == {}


def _everywhere(a, q, c, p) -> torch.Tensor:
    from vitviz.kindapi import kind_of

    return torch.zeros(kind_of(a).token_geometry(a).grid)


def test_a_method_for_every_kind_is_one_entry_and_a_kind_may_say_it_cannot(monkeypatch):
    toy = register_method(Method("toy-everywhere", "Everywhere", _everywhere))
    try:
        assert toy.applies_to >= set(BUILTIN_KINDS)
        swin_methods = importlib.import_module("vitviz.kinds.swin.methods")
        cannot = {**swin_methods.CANNOT, "toy-everywhere": "a Swin has no such thing"}
        monkeypatch.setattr(swin_methods, "CANNOT", cannot)
        assert "swin" not in toy.applies_to and "vit" in toy.applies_to
        why = toy.missing_on(get_kind("swin"))
        assert why is not None and why.startswith("Everywhere applies to")
        assert "not to this swin model: a Swin has no such thing (it runs attention," in why
    finally:
        unregister_method("toy-everywhere")


@pytest.mark.parametrize("name", BUILTIN_KINDS)
def test_each_kind_declares_its_methods_once_against_the_table(name):
    """``METHODS`` and ``CANNOT`` name table methods, never the same one twice; a version
    refuses only parameters of the table; every table method a kind neither runs nor refuses
    is one the kind runs through the table's own version."""
    kind = get_kind(name)
    package = "vit" if name == "clip" else name
    declared = importlib.import_module(f"vitviz.kinds.{package}.methods")
    table = set(method_names())
    assert set(declared.METHODS) <= table and set(declared.CANNOT) <= table
    assert not set(declared.METHODS) & set(declared.CANNOT)
    parameters = {p.name for m in all_methods() for p in m.parameters}
    for method, version in declared.METHODS.items():  # a reason shared by a kind's chains may
        # name a parameter one of them lacks (ready for the day its entry gets it)
        assert set(version.refusals) <= parameters, (name, method)
        assert kind.implementation(method) is version
    for m in all_methods():
        if m.name in declared.CANNOT:
            assert m.implementation_for(kind) is None
            assert declared.CANNOT[m.name] in (m.missing_on(kind) or "")
        elif m.name not in declared.METHODS:
            assert m.compute is not None and m.implementation_for(kind) is not None
