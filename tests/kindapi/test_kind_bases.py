"""The kinds stand on bases (DESIGN §3): ``KindBase`` holds the defaults, ``TokenLayoutKind``
and ``StagedKind`` what a family shares; ``ModelKind`` is made of role protocols."""

from __future__ import annotations

import typing

import pytest

from vitviz.kindapi import ModelKind, all_kinds, get_kind
from vitviz.kindapi.base import KindBase
from vitviz.kindapi.protocol import (
    AnalysingMembers,
    EngineMembers,
    LoadingMembers,
    MethodMembers,
    PresentingMembers,
)
from vitviz.kinds.staged import StagedKind
from vitviz.kinds.table_kind import TableKind
from vitviz.kinds.token_layout import TokenLayoutKind

ROLES = (LoadingMembers, AnalysingMembers, MethodMembers, PresentingMembers, EngineMembers)


def _members(protocol: type) -> set[str]:
    return {m for m in vars(protocol) if not m.startswith("_")} - {"mro"}


def test_model_kind_is_its_identity_and_the_roles() -> None:
    roles = [_members(r) for r in ROLES]
    assert all(roles) and sum(map(len, roles)) == len(set().union(*roles))  # each member once
    assert set(ModelKind.__mro__[1:6]) == set(ROLES)
    assert _members(ModelKind) - set(typing.get_type_hints(ModelKind)) == {"owns"}


@pytest.mark.parametrize(
    ("name", "base"),
    [("vit", TokenLayoutKind), ("cait", TokenLayoutKind), ("xcit", TokenLayoutKind),
     ("clip", TokenLayoutKind), ("swin", StagedKind), ("pyramid", StagedKind),
     ("convit", TokenLayoutKind), ("pit", StagedKind), ("levit", StagedKind),
     ("mvit", StagedKind), ("crossvit", StagedKind), ("tnt", StagedKind),
     ("mobilevit", StagedKind)],
)  # fmt: skip
def test_each_kind_stands_on_its_familys_base(name: str, base: type) -> None:
    kind = get_kind(name)
    assert isinstance(kind, base) and isinstance(kind, KindBase) and isinstance(kind, ModelKind)
    others = {type(k) for k in all_kinds()} - {type(kind)}
    assert not any(isinstance(kind, other) for other in others), "a kind subclasses another"


def test_a_kind_inherits_every_member_but_its_own_work() -> None:
    """KindBase: all but the kind's own work and the engine members made through the method
    table and the pipeline (above the contract), which TableKind adds."""
    roles = set().union(*(_members(r) for r in ROLES)) | {"owns"}
    engine = {"image_numbers", "method_map", "evaluate_faithfulness", "export_npz",
              "view_heads_picture"}  # fmt: skip
    assert {m for m in roles if not hasattr(KindBase, m)} == own_work() | engine
    assert {m for m in roles if not hasattr(TableKind, m)} == own_work()


def own_work() -> set[str]:
    return {
        "config_from_dict", "build_from_state", "library_outputs", "analyze", "token_geometry",
        "parameter_bounds", "head_statistics", "npz_arrays", "layer_rows", "query_maps",
    }  # fmt: skip


def test_the_staged_bases_words_name_the_kind() -> None:
    swin, pyramid = get_kind("swin"), get_kind("pyramid")
    assert list(StagedKind.block_names([0, 0, 1, 1, 1, 2])) == [
        "0.0", "0.1", "1.0", "1.1", "1.2", "2.0"]  # fmt: skip
    assert swin.unused_options()["layers"] == (
        "applies to ViT models; a Swin's analysis keeps every block"
    )
    assert "a pyramid ViT" in pyramid.unused_options()["batch_size"]
    assert swin.apply_prompts(None, ["a cat"]).startswith("a Swin's classes are its head's")
    assert get_kind("vit").apply_prompts(None, ["a cat"]).startswith("a ViT's classes")
