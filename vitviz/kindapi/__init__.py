"""The kind contract: what the shared layers ask of a model kind and the registry that finds
one, torch-free, beneath everything that uses it (DESIGN §3). The kind packages
(``vitviz/kinds/``) stand on top as plug-ins."""

from vitviz.kindapi.grids import LayerGrid, TokenGeometry
from vitviz.kindapi.intermediates import (
    BlockOutputs,
    HeadReplacement,
    Intermediates,
    OnRows,
    Readout,
)
from vitviz.kindapi.protocol import (
    FaithfulnessReport,
    ImageNumbers,
    KindAnalysis,
    KindMethod,
    LayerRow,
    Loaded,
    MethodImplementation,
    ModelKind,
    ModelShape,
    QueryMaps,
    Session,
    ViewWords,
)
from vitviz.kindapi.registry import (
    KIND_PACKAGES,
    UnknownKindError,
    all_kinds,
    get_kind,
    kind_of,
    register_kind,
    unregister_kind,
)

__all__ = [
    "KIND_PACKAGES",
    "BlockOutputs",
    "FaithfulnessReport",
    "HeadReplacement",
    "ImageNumbers",
    "Intermediates",
    "KindAnalysis",
    "KindMethod",
    "LayerGrid",
    "LayerRow",
    "Loaded",
    "MethodImplementation",
    "ModelKind",
    "ModelShape",
    "OnRows",
    "QueryMaps",
    "Readout",
    "Session",
    "TokenGeometry",
    "UnknownKindError",
    "ViewWords",
    "all_kinds",
    "get_kind",
    "kind_of",
    "register_kind",
    "unregister_kind",
]
