"""What the rest of vitviz asks of a model kind (a ViT, a Swin, ...): ``ModelKind``, made of
one ``typing.Protocol`` per role (DESIGN §3).

A kind is one package under ``vitviz/kinds/`` whose ``KIND`` object meets ``ModelKind``. The shared
layers (analysis façade, method table, faithfulness, statistics, export, batches, the CLI, the
engine and the window) call these members and never test which kind they hold.

Its roles:
- identity (``ModelKind`` itself): ``name``, ``label``, ``owns``;
- ``LoadingMembers``: ``families`` (checkpoint families, detected from keys), ``config_from_dict``
  and ``build_from_state`` (a native file's model, a conversion's), ``library_outputs`` (what the
  library check compares), ``model_code`` (a user's module it recognises), ``training`` (see
  ``vitviz.kindapi.sides``), ``probabilities``, ``rescore``, ``apply_prompts``;
- ``AnalysingMembers``: ``analyze`` (one forward pass with capture into one analysis object),
  ``analyze_images``, ``finish_analysis``, ``token_geometry`` (grids, prefix tokens, token <->
  image region, windows), ``intermediates``;
- ``MethodMembers``: ``implementation`` (its version of a method of the table, by the method's
  name), ``missing_method``, ``parameter_bounds``, ``head_statistics``;
- ``PresentingMembers``: ``architecture``, ``parts``, ``npz_arrays``, ``map_picture``,
  ``heads_picture``, ``unused_options``, ``layer_rows`` (head-grid rows; a layer's window
  partition, drawn over the big map, is in its ``LayerGrid.windows``);
- ``EngineMembers`` (the engine and window): ``model_shape``, ``check_memory``,
  ``image_numbers``, ``default_class``, ``query_maps``, ``method_map``, ``evaluate_faithfulness``,
  ``export_npz``, ``view_heads_picture``, ``view_map_picture`` (what the engine's jobs ask; the
  numbers cross to the window as plain numpy, described by ``LayerRow``, ``TokenGeometry`` and
  ``ViewWords``).

``vitviz.kindapi.base.KindBase`` holds the defaults most kinds keep (``TableKind`` in
``vitviz.kinds.table_kind`` adds the engine's members made through the method table).

This module imports neither torch nor Qt at run time (the window reads its data classes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from vitviz.kindapi.grids import LayerGrid as LayerGrid  # re-exported
from vitviz.kindapi.grids import TokenGeometry
from vitviz.kindapi.sides import ModelCodeSide, ModelConfig, TrainingSide

if TYPE_CHECKING:  # torch-free at run time: the Training tab reads the kinds before torch loads
    from pathlib import Path

    import numpy as np
    from PIL import Image
    from torch import Tensor, nn

    from vitviz.imaging import Preprocessing
    from vitviz.imaging.loading import ImageSource
    from vitviz.kindapi.feature_sites import CamLayers, FeatureSite, LayerChoice
    from vitviz.kindapi.intermediates import (
        BlockOutputs,
        HeadReplacement,
        Intermediates,
        Readout,
    )

    ImageInput = ImageSource | Tensor  # what analyze reads: a file, bytes, an image or (C, H, W)


@dataclass(frozen=True)
class LayerRow:
    """One row of the window's head grid: an attention layer as the user reads it.

    ``label``: e.g. "3" for a ViT's layer 3, "2.2 SW" for a Swin's stage 2 block 2 (shifted);
    ``heads``: its heads (rows of a kind with fewer heads in some layers are padded with NaN).
    """

    label: str
    heads: int
    tooltip: str = ""
    # -- engine and window (helper "engine"): the layer in the window's other words ----------
    name: str = ""  # on the head statistics' axis ("2.2"); "": the layer's number
    title: str = ""  # in the big map's title ("layer 3 of 12", "block 2.2 SW-MSA (window 7, …)")
    hover: str = ""  # in the head grid's hover text ("layer 3", "block 2.2 SW")
    selector: str = ""  # after the Layer selector's number ("", " · 2.2 SW")


@runtime_checkable
class KindAnalysis(Protocol):
    """One image's forward pass in a model of some kind, with what its methods need.

    ``input`` (C, H, W) normalised model input; ``pixels`` (H, W, 3) uint8 of it; ``logits`` and
    ``probs`` (classes,) float32 (empty without a head); ``kind`` the name of its kind.
    """

    kind: str
    input: Tensor
    logits: Tensor
    probs: Tensor

    @property
    def top_class(self) -> int: ...


class MethodImplementation(Protocol):
    """A kind's version of a method of the method table: (analysis, query cell or None,
    target class or None, the parameters it takes) -> a map over the grid of one of its
    layers (``TokenGeometry.grid``, or a ``LayerGrid.grid``: a Swin's attention of one block)."""

    def __call__(
        self,
        analysis: KindAnalysis,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> Tensor: ...


# -- what the method table asks of a kind's version ----


@dataclass(frozen=True)
class KindMethod:
    """A kind's version of one method of the table, as ``ModelKind.implementation`` gives it.

    ``compute``: the map (see ``MethodImplementation``). ``refusals`` {parameter: why it means
    nothing to this version}: the table parameters it does not take (the CLI refuses them with
    the reason); it takes every other one its table entry lists, one added later included.
    ``takes`` (optional): a closed list of those it reads instead (None: all but ``refusals``).
    ``requires(label, model)``: why it can't run on ``model`` although the kind has a version
    (e.g. it needs vitviz's own network, not one from the user's code), or None.
    """

    compute: MethodImplementation
    takes: frozenset[str] | None = None
    refusals: Mapping[str, str] = field(default_factory=dict)
    requires: Callable[[str, nn.Module], str | None] | None = None

    def __call__(
        self,
        analysis: KindAnalysis,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> Tensor:
        return self.compute(analysis, query, target_class, params)

    def takes_parameter(self, name: str) -> bool:
        if self.takes is None:
            return name not in self.refusals
        return name in self.takes

    def refusal(self, name: str) -> str | None:
        """Why this version does not take parameter ``name`` (a clause), None when it does."""
        if self.takes_parameter(name):
            return None
        return self.refusals.get(name, "this version of the method does not take it")

    def unavailable_on(self, label: str, model: nn.Module | None) -> str | None:
        """Why it can't run on ``model`` (None: not known yet), a sentence, or None."""
        if self.requires is None or model is None:
            return None
        return self.requires(label, model)


# -- engine and window (helper "engine") -------------------------------------------------------
# What the engine's jobs (vitviz.workers.jobs) ask of a kind, and the plain data that crosses to
# the window. The window draws these without knowing the kind.


@dataclass(frozen=True)
class ModelShape:
    """What the window shows about a model: ``depth`` attention layers, ``heads`` the most heads
    of a layer, ``num_prefix_tokens`` (CLS, registers), its config as a dict; ``headline`` its
    shape in the window's status line ("12 layers × 12 heads"); ``architecture`` the model
    dialog's lines about its shape. ``takes_prompts``: its classes are prompts the user types
    (``ModelKind.apply_prompts``; the window shows its prompt box), ``prompts`` those it scores
    now (none yet: no head); False for a kind whose classes are its head's."""

    depth: int
    heads: int
    num_prefix_tokens: int
    config: dict[str, Any] = field(default_factory=dict)
    headline: str = ""
    architecture: tuple[str, ...] = ()
    # -- prompts ---------------------------------------------------
    takes_prompts: bool = False
    prompts: tuple[str, ...] = ()


@dataclass(frozen=True)
class ViewWords:
    """How the window words a kind's layers and queries (format strings of ``str.format``).

    Query fields: ``row``, ``col`` (the clicked cell), ``index`` (its row-major index), ``y``,
    ``x`` (its centre in input pixels); in titles also ``trow``, ``tcol``, ``th``, ``tw`` (the
    query's token in the layer shown and that layer's grid). ``method_query`` /
    ``method_query_none``: the words after a method's label in the big map's title, the query's
    token read in the last layer (None: the method's parameters are listed); ``method_fixed``:
    per method name, fixed words instead.
    """

    layer: str = "layer"  # the Layer selector's prefix
    axis: str = "layer"  # the head statistics' x axis
    head: str = "head {head}"  # fields head (counted from 0), heads (the layer's), last
    query_none: str = "CLS token"  # the query label without a query
    query_cell: str = "patch row {row}, col {col} (#{index})"
    title_query_none: str = "query CLS"
    query_reset: str = ""  # the query reset button's words ("": CLS, or the mean without one)
    title_query: str = "query patch ({row}, {col})"
    method_query_none: str | None = None
    method_query: str | None = None
    method_fixed: dict[str, str] = field(default_factory=dict)
    # -- predictions -----------------------------------------------
    probability: str = ""  # the predictions chart's axis; "": as the model's outputs say
    class_noun: str = "class"  # what a bar of the chart is ("prompt")

    def query_text(self, query: tuple[int, int] | None, geometry: TokenGeometry) -> str:
        """The query row's words for ``query``: ``query_none`` without a clicked cell (the CLS
        token, the mean, the average pool), else ``query_cell`` of cell (row, col) of
        ``geometry``'s clickable grid (its token read in the first layer's grid)."""
        if query is None:
            return self.query_none
        r, c = query
        p = geometry.cell_pixels
        th, tw = geometry.layers[0].grid if geometry.layers else geometry.grid
        return self.query_cell.format(
            row=r,
            col=c,
            index=r * geometry.grid[1] + c,
            y=(r + 0.5) * p,
            x=(c + 0.5) * p,
            trow=r,
            tcol=c,
            th=th,
            tw=tw,
        )


@dataclass(frozen=True)
class ImageNumbers:
    """One analysed image as the window draws it, apart from the photo and the query.

    ``input_pixels`` (H, W, 3) uint8; ``grid`` (gh, gw) the clickable grid of ``patch_size``
    cells; head statistics ``mean_distance``, ``entropy``, ``prefix_share`` (L, heads) with NaN
    for heads a layer lacks; ``token_norms`` (L, N); ``attention`` (L, H, N, N) float32 read-only
    for the window's own query maps, or None (the engine computes them); ``unavailable``
    {method: why}; ``ignored_params`` {method: {parameter this kind ignores: why}};
    ``thumb_grid`` the head grid's thumbnails' grid of ``thumb_pixels``-pixel cells.
    """

    input_pixels: np.ndarray
    grid: tuple[int, int]
    patch_size: int
    num_prefix_tokens: int
    num_layers: int
    num_heads: int
    class_names: list[str]
    probs: np.ndarray
    logits: np.ndarray
    top_class: int
    mean_distance: np.ndarray
    entropy: np.ndarray
    prefix_share: np.ndarray
    token_norms: np.ndarray
    device: str
    attention: np.ndarray | None
    unavailable: dict[str, str]
    ignored_params: dict[str, dict[str, str]]
    thumb_grid: tuple[int, int]
    thumb_pixels: int
    layer_rows: tuple[LayerRow, ...]
    token_geometry: TokenGeometry
    words: ViewWords


@dataclass(frozen=True)
class QueryMaps:
    """A query's attention in every layer and head.

    ``head_maps`` (L, heads, *thumb_grid) float32 (NaN for heads a layer lacks), ``mean_maps``
    (L, *thumb_grid); ``layer_maps`` per layer (heads, h_l, w_l) at the layer's own grid;
    ``prefix_attention`` (L, heads, num_prefix); ``query_tokens`` per layer the query's token in
    its grid (−1: no query token, the CLS or the mean); ``levels`` one colour scale for all.
    """

    head_maps: np.ndarray
    mean_maps: np.ndarray
    layer_maps: tuple[np.ndarray, ...]
    prefix_attention: np.ndarray
    query_tokens: tuple[int, ...]
    levels: tuple[float, float]


class Loaded(Protocol):
    """A model opened with what explaining it needs (``vitviz.checkpoints.LoadedModel``)."""

    model: nn.Module
    class_names: list[str]
    preprocessing: Preprocessing

    @property
    def kind(self) -> ModelKind: ...  # resolved once, where the model entered (DESIGN §3)


class Session(Protocol):
    """The engine's current model and analysis. A member that runs the pass again (e.g. for a
    class's gradients) replaces ``analysis``, which later requests reuse."""

    loaded: Loaded
    analysis: KindAnalysis

    @property
    def kind(self) -> ModelKind: ...  # the current model's, carried by ``loaded``


class FaithfulnessReport(Protocol):
    """Deletion and insertion curves of methods on one image
    (``vitviz.explain.faithfulness.ImageFaithfulness``): per method name its curves, AUCs and
    localisation, and the class they were measured for."""

    target_class: int
    methods: Mapping[str, Any]


class EngineMembers(Protocol):
    """The members of ``ModelKind`` the engine calls (kept apart for reading)."""

    def model_shape(self, loaded: Loaded) -> ModelShape:
        """Depth, most heads, prefix tokens, config and the words for the shape of ``loaded``'s
        model (a LoadedModel: its preprocessing is named too)."""
        ...

    def check_memory(self, model: nn.Module, image_size: tuple[int, int]) -> None:
        """Raise ValueError (NotEnoughMemoryError) when analysing ``image_size`` inputs would
        not fit in memory; a kind whose needs are not modelled checks nothing."""
        ...

    def image_numbers(self, session: Session) -> ImageNumbers:
        """What the window draws of ``session.analysis`` (predictions, head statistics, layers,
        token geometry, the methods it can't run)."""
        ...

    def default_class(self, session: Session) -> int:
        """The class the maps explain when none is chosen: the current pass's (its top
        prediction, or the class a gradient pass was run again for); −1 without a head."""
        ...

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        """Every layer's and head's attention of the query cell (None: the CLS or the mean).
        ValueError: a cell outside the grid."""
        ...

    def method_map(
        self,
        session: Session,
        method: str,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> np.ndarray:
        """(gh, gw) float32 map of a method of the table; ValueError: it can't run here."""
        ...

    def evaluate_faithfulness(
        self,
        session: Session,
        names: Sequence[str],
        *,
        steps: int,
        mask: np.ndarray | None,
        name: str,
        params: Mapping[str, Mapping[str, Any]],
    ) -> FaithfulnessReport:
        """Deletion and insertion curves of ``names`` (the query without a clicked cell, the
        current pass's class); ``mask`` (gh, gw) bool for the localisation numbers."""
        ...

    def export_npz(
        self,
        session: Session,
        path: Path,
        method: str,
        params: Mapping[str, Any],
        target_class: int | None,
    ) -> Path:
        """The numbers of ``vitviz-cli explain`` with the shown method, as an .npz."""
        ...

    def view_heads_picture(
        self,
        session: Session,
        query: tuple[int, int] | None,
        colormap: str,
        opacity: float,
        per_head: bool,
    ) -> Image.Image:
        """The window's head grid as a PNG: the query's thumbnails of every layer and head,
        titled (File ▸ Export)."""
        ...

    def view_map_picture(
        self, session: Session, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        """The window's big map as a PNG: ``values`` (the map on screen) over the model input."""
        ...


class LoadingMembers(Protocol):
    """Role "loading": how a kind's checkpoints are found, rebuilt and checked, its model code,
    training and prompts (what ``vitviz.checkpoints`` and the Training tab ask)."""

    # -- loading ------------------------------------------------------------------------------
    @property
    def families(self) -> Sequence[Any]:
        """Its checkpoint families (``vitviz.checkpoints.families.base.Family``), tried before
        the ViT's generic layouts."""
        ...

    # -- loading, model code and training (helper "loading") -----------------------------------
    def config_from_dict(self, data: dict[str, object]) -> ModelConfig:
        """Its model config from ``ModelConfig.to_dict`` (a native file's ``config``);
        ValueError / TypeError / KeyError for a damaged one."""
        ...

    def build_from_state(self, config: ModelConfig, state: Mapping[str, Tensor]) -> nn.Module:
        """Its network of ``config`` in eval mode holding exactly ``state`` (no second copy);
        CheckpointError naming the keys or shapes that don't fit."""
        ...

    def library_outputs(
        self, model: nn.Module, x: Tensor
    ) -> tuple[Tensor, Sequence[Tensor] | None]:
        """``model``'s logits (B, classes) of x (B, C, H, W) and the attention maps (L × (B, heads,
        N, N)) comparable with the library model it claims to be; None: its maps aren't the
        library's (a Swin's windows), only the logits are compared."""
        ...

    @property
    def model_code(self) -> ModelCodeSide | None:
        """How it opens a module from a user's file it recognises; None: it has no own way (the
        ViT's is vitviz.modelcode's generic capture)."""
        ...

    @property
    def training(self) -> TrainingSide | None:
        """Its training presets, settings, checks and network; None: vitviz can't train one."""
        ...

    def probabilities(self, model: nn.Module, logits: Tensor) -> Tensor:
        """(B, classes) logits -> the probabilities the window shows and faithfulness measures:
        a softmax, or (a SigLIP's prompts) each class's own sigmoid."""
        ...

    def rescore(self, analysis: KindAnalysis, loaded: Loaded) -> KindAnalysis | None:
        """``analysis`` of the same image for ``loaded``'s classes as they are now (new prompts)
        without running the network again, or None when the kind can't (the image is then
        analysed again). Gradients of the old classes are dropped."""
        ...

    # -- prompts ------------------------------------------------------------------------------
    def apply_prompts(self, loaded: Loaded, prompts: Sequence[str]) -> str | None:
        """Make typed ``prompts`` the classes of ``loaded`` (a CLIP's text tower scores them;
        ``loaded.class_names`` become the prompts). Returns why it can't (a clause: a ViT's
        classes are its head's), or None when done."""
        ...


class AnalysingMembers(Protocol):
    """Role "analysing": one image's (or a batch's) forward pass with what the methods need, and
    where its tokens sit (what ``vitviz.pipeline`` and the explain façade ask)."""

    # -- analysis -----------------------------------------------------------------------------
    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> KindAnalysis:
        """One forward pass of ``loaded``'s model on ``image`` with its attention captured."""
        ...

    def input_stride(self, model: nn.Module) -> int:
        """The side in input pixels that its analysis makes every input a multiple of (the
        sizes ``resize: "fit"`` gives, ``vitviz.imaging.input_size_for``): its finest tokens'
        ``patch_size``, or a stem's stride (a PiT's, a LeViT's) where that is what it takes."""
        ...

    def analyze_images(
        self, loaded: Loaded, images: Sequence[ImageInput], **options: Any
    ) -> Iterator[Any]:
        """One ``vitviz.pipeline.batch.BatchItem`` per image, in order, from the kind's own
        batches; asked only of a kind that takes ``batch_size`` (``unused_options`` lacks it)."""
        ...

    # helper "siglip": what a kind adds to the ViT analysis's result (a SigLIP's probe row)
    def finish_analysis(self, analysis: KindAnalysis) -> KindAnalysis:
        """``analysis`` as this kind explains it, made by the ViT's analysis (one image or a
        batch's): itself for a ViT; a SigLIP's adds its probe's row and sigmoids."""
        ...

    def token_geometry(self, analysis: KindAnalysis) -> TokenGeometry:
        """Where ``analysis``'s tokens sit on the model input, layer by layer."""
        ...

    def intermediates(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        replace: HeadReplacement | None = None,
        logits_only: bool = False,
    ) -> Intermediates:
        """One forward pass of x (B, C, H, W) with every block's output on its grid and every
        head's output before the output projection, ``replace``'s heads swapped in (DESIGN §3);
        ``logits_only``: the pass keeps nothing but its logits (``blocks``, ``heads`` and their
        grids empty), for the many passes that need no more (head effects, patching);
        ValueError (a clause) for a model it can't take apart, or a bad replacement."""
        ...

    def readout(self, model: nn.Module) -> Readout:
        """``model``'s final norm and head as they apply to any block's tokens (the logit lens,
        the PCA's final tokens; DESIGN §5); ValueError (a clause) where it has none."""
        ...

    def analysis_blocks(self, analysis: KindAnalysis) -> BlockOutputs | None:
        """The block outputs ``analysis``'s own forward pass kept, laid out as
        ``intermediates`` gives them for its input (batch of one), so the feature views need
        no pass of their own (DESIGN §5); None where it kept none (the accessor's pass then
        makes them)."""
        ...

    def feature_site(self, model: nn.Module, x: Tensor, layer: LayerChoice) -> FeatureSite:
        """Where the CAM family reads ``layer`` (a block's norm1, norm2 or output) of ``model``
        for the input x (B, C, H, W) (DESIGN §5); ValueError (a clause) for a layer it can't
        read."""
        ...

    def norm1_is_pre_norm(self, model: nn.Module, block: int) -> bool:
        """Whether block ``block`` (counted as ``feature_site`` counts them, −1 the last) has a
        norm1 whose output is the block's input normalised, the tokens its attention reads
        (token Grad-CAM's features); False for a post-norm block (its norm1 follows the
        attention) or a block without one norm1. ``auto`` reads the last block's norm1 where
        this holds, else its output (DESIGN §5)."""
        ...

    def cam_layers(self, model: nn.Module) -> CamLayers:
        """How many blocks ``feature_site``'s ``layer`` counts (the accessor's ``blocks``: an
        XCiT's XCA and class-attention blocks; the window's layer picker offers each), the layer
        ``auto`` reads and the post-norm blocks; no blocks for a model it can't take apart."""
        ...


class MethodMembers(Protocol):
    """Role "methods": its versions of the method table's methods and what they index."""

    # -- methods ------------------------------------------------------------------------------
    def implementation(self, method: str) -> KindMethod | None:
        """Its version of the method of the table called ``method``; None: it has none."""
        ...

    def missing_method(self, method: str) -> str | None:
        """Why it can't run table method ``method`` (a clause, e.g. the CLS token a Swin lacks;
        the table's kind-independent version is refused too), or None: it runs its own version
        or the table's."""
        ...

    def parameter_bounds(self, subject: KindAnalysis | nn.Module) -> tuple[int, int]:
        """(layers, heads) a method's ``per="layer"`` / ``per="head"`` parameters index on an
        analysis or a model of this kind: a ViT's layers and heads, a Swin's blocks of all
        stages and the most heads of a stage."""
        ...

    def head_statistics(self, analysis: KindAnalysis) -> dict[str, np.ndarray]:
        """One image's head statistics, as ``vitviz-cli stats`` averages them over a folder:
        ``distance`` (mean attention distance, pixels of the model input), ``entropy`` (nats)
        and ``prefix_share``, each (L, heads) float32 over its attention layers and the most
        heads of a layer, NaN for a head a layer lacks or a statistic it has no meaning for
        (a Swin's prefix share: it has no prefix tokens)."""
        ...


class PresentingMembers(Protocol):
    """Role "presenting": what the CLI and the window say and draw of a model or an analysis
    (its shape in words, statistics, the npz's arrays, pictures, head-grid rows)."""

    def architecture(self, model: nn.Module) -> str:
        """One line of its shape for ``vitviz-cli info`` (a ViT: width, depth, heads; a Swin:
        its stages' widths, depths, heads and windows). Added by the explain helper."""
        ...

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        """The building blocks ``model`` uses, in words (the model info's "parts" line): its
        attention, norms, MLP, positions, prefix tokens, pooling, stem."""
        ...

    # -- export -----------------------------------------
    def npz_arrays(self, analysis: KindAnalysis) -> dict[str, np.ndarray]:
        """Its own arrays of the explain .npz, beside the shared ones (docs/cli.md's npz table)."""
        ...

    def map_picture(
        self,
        analysis: KindAnalysis,
        map_: np.ndarray,
        colormap: str,
        max_side: int | None,
        title: list[str] | None,
    ) -> Image.Image:
        """A map of the method table coloured over the image (a ViT: the source at most
        ``max_side`` on its long side; a Swin: the model input), with ``title`` lines and a
        colour bar where the kind titles its pictures."""
        ...

    def heads_picture(
        self, analysis: KindAnalysis, colormap: str, titled: bool
    ) -> Image.Image | None:
        """The explain PNG of every layer and head (``<stem>_heads.png``), None: it draws none."""
        ...

    def unused_options(self) -> Mapping[str, str]:
        """{``analyze`` option: why this kind does not use it} (e.g. a Swin's ``batch_size``):
        the CLI names the option and the reason instead of ignoring it silently."""
        ...

    # -- window -------------------------------------------------------------------------------
    def layer_rows(self, analysis: KindAnalysis) -> tuple[LayerRow, ...]:
        """The head grid's rows, one per attention layer."""
        ...


@runtime_checkable
class ModelKind(
    LoadingMembers, AnalysingMembers, MethodMembers, PresentingMembers, EngineMembers, Protocol
):
    """A kind of network vitviz explains: its identity and the roles' members. Its package
    registers one object meeting this; ``vitviz.kindapi.base.KindBase`` holds the members most
    kinds leave as they are (DESIGN §3)."""

    name: str  # "vit", "swin": a model's ``model_kind``, the npz's ``kind``
    label: str  # "Vision Transformer", "Swin Transformer": what the window and the CLI say

    def owns(self, model: nn.Module) -> bool:
        """``model`` is of this kind (read only when the model has no ``model_kind`` naming a
        registered kind)."""
        ...
