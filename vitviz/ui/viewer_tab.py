"""The Viewer tab: the model input with its grid, the large map, the head grid, predictions,
controls and head statistics. Results arrive from the engine; nothing here touches torch."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QScrollArea, QSplitter, QTabWidget, QVBoxLayout, QWidget

from vitviz.ui.canvas import ImageCanvas
from vitviz.ui.charts import PredictionsChart
from vitviz.ui.controls import ATTENTION, MEAN, ViewControls, from_layer_picker, map_reads
from vitviz.ui.faithfulness_panel import FaithfulnessPanel
from vitviz.ui.head_grid_panel import HeadGridPanel
from vitviz.ui.knockout import knocked_words
from vitviz.ui.layer_view import LayerView
from vitviz.ui.lines_label import LinesLabel
from vitviz.ui.prompt_box import PromptBox
from vitviz.ui.settings import AppSettings
from vitviz.ui.stats_panel import StatsPanel
from vitviz.ui.view_state import (
    NO_CLASS_TO_EXPLAIN,
    PREDICTIONS_TITLE,
    Choices,
    ViewState,
    class_words,
    derive,
    map_scale,
    shown_class,
)
from vitviz.workers import jobs
from vitviz.workers.engine import EngineClient
from vitviz.workers.messages import (
    FaithfulnessResult,
    ImageResult,
    MapParams,
    MapsResult,
    MethodInfo,
)

INPUT_TITLE = "Model input · click a patch to make it the query"
# The side panel's width: this share of the tab, between these bounds (a small window's
# views and head grid need the pixels more: 12 × 12 heads are 2 bands of 13 tiles wide)
PANEL_SHARE, PANEL_PX = 0.24, (312, 380)
PLACEHOLDER = (
    "Drop an image and a ViT checkpoint here\n(or use File ▸ Open image… "
    "and File ▸ Open checkpoint…)"
)


class ViewerTab(QWidget):
    hoverText = Signal(str)  # for the status bar

    def __init__(self, client: EngineClient, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.client = client
        self.image: ImageResult | None = None
        self.maps: MapsResult | None = None
        self._hovered: tuple[int, int] | None = None  # the patch under the pointer
        self.query: tuple[int, int] | None = None
        self.target_class: int | None = None
        self.layers: LayerView | None = None  # the image's layers: rows, token grids, words
        self.state: ViewState = derive(None, [], Choices())  # what the view shows (view_state)

        # the plain model input (its patch grid, the query): the map is beside it, never on it
        self.input_view = ImageCanvas(INPUT_TITLE, colorbar=False)
        self.map_view = ImageCanvas("Map over the image")
        self.head_panel = HeadGridPanel()  # the head grid and its colour-scale choice
        self.head_grid = self.head_panel.grid
        self.predictions = PredictionsChart()
        self.predictions.setMinimumHeight(110)
        self.predictions.setMaximumHeight(130)  # the controls below fit at 1366 × 768
        self.stats_panel = StatsPanel()  # this image's statistics, or a folder's
        self.stats = self.stats_panel.view
        self.prompt_box = PromptBox()  # shown for a model whose classes are typed prompts
        self.prompt_box.hide()
        self.controls = ViewControls()
        self.faithfulness = FaithfulnessPanel()
        self.placeholder = QLabel(PLACEHOLDER)
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setStyleSheet("color: #888; font-size: 15px;")

        views = QSplitter(Qt.Orientation.Horizontal)
        views.addWidget(self.input_view)
        views.addWidget(self.map_view)
        views.setSizes([400, 600])
        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(views)
        left.addWidget(self.head_panel)
        left.setSizes([520, 380])
        self.views_splitter, self.left_splitter = views, left

        right_tabs = QTabWidget()
        panel = QWidget()
        panel_layout = QVBoxLayout(panel)
        panel_layout.setContentsMargins(4, 4, 4, 4)
        # a prompt's or a missing head's words wrap in a narrow panel; a steady height, so a
        # query change doesn't lay the panel out again (nor repaint the chart below)
        self.predictions_title = LinesLabel(PREDICTIONS_TITLE.format(noun="class"), lines=1, pad=0)
        panel_layout.addWidget(self.predictions_title)
        panel_layout.addWidget(self.predictions)
        panel_layout.addWidget(self.prompt_box)
        panel_layout.addWidget(self.controls, 1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(panel)
        right_tabs.addTab(scroll, "Explain")
        right_tabs.addTab(self.faithfulness, "Faithfulness")
        right_tabs.addTab(self.stats_panel, "Head statistics")
        self.right_tabs = right_tabs

        main = QSplitter(Qt.Orientation.Horizontal)
        main.addWidget(left)
        main.addWidget(right_tabs)
        main.setSizes([1000, PANEL_PX[1]])
        main.setStretchFactor(0, 1)  # a larger window widens the views and the grid, not the panel
        main.setStretchFactor(1, 0)
        self.main_splitter = main
        self._panel_moved = False  # the user dragged the panel's edge: its width stays theirs
        main.splitterMoved.connect(self._on_panel_moved)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.placeholder)
        layout.addWidget(main, 1)
        main.hide()

        self.controls.paramsChanged.connect(self.request_maps)
        self.controls.displayChanged.connect(self.refresh_display)
        self.controls.queryResetRequested.connect(lambda: self.set_query(None))
        self.controls.classResetRequested.connect(lambda: self.set_target_class(None))
        self.input_view.patchClicked.connect(lambda r, c: self.set_query((r, c)))
        self.map_view.patchClicked.connect(lambda r, c: self.set_query((r, c)))
        self.input_view.patchHovered.connect(self._on_hover)
        self.map_view.patchHovered.connect(self._on_hover)
        self.head_grid.cellHovered.connect(self._on_head_hover)
        self.head_grid.cellClicked.connect(self.show_head)
        self.predictions.classClicked.connect(self.set_target_class)
        self.faithfulness.measureRequested.connect(self.request_faithfulness)
        self.controls.method.currentIndexChanged.connect(self._faithfulness_stale)

    def panel_width(self) -> int:
        """The side panel's width for this tab's width (PANEL_SHARE within PANEL_PX)."""
        least, most = PANEL_PX
        return max(least, min(most, round(PANEL_SHARE * self.width())))

    def _on_panel_moved(self) -> None:
        self._panel_moved = True

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        total = sum(self.main_splitter.sizes())
        if not self._panel_moved and total > 0:
            panel = self.panel_width()
            self.main_splitter.setSizes([max(1, total - panel), panel])

    # -- results from the engine -----------------------------------------------------------------
    def apply_image(self, result: ImageResult) -> None:
        old = self.image
        if old is None or old.grid != result.grid:
            self.query = None  # a patch of another grid: back to CLS (or the mean)
            self._hovered = None  # the views say what the pointer is over once they are set
        self.image = result
        self.maps = None
        if old is None or old.geometry() != result.geometry():
            self._forget_model_views()
        self.placeholder.hide()
        self.main_splitter.show()
        self.layers = LayerView(result)
        rows = result.layer_rows
        self.controls.set_rows(
            result.words.layer, [r.selector for r in rows], [r.heads for r in rows]
        )
        self.controls.param_panel.ignored = result.ignored_params
        self.controls.set_shape(
            result.num_layers,
            result.num_heads,
            result.cam_blocks,
            result.cam_auto,
            result.cam_post_norm,
        )
        self.controls.set_unavailable(result.unavailable)
        self.faithfulness.offer(bool(result.class_names))
        self.faithfulness.clear()
        # the clickable grid (hover and query cells) is the token geometry's, over the input
        geometry = self.layers.geometry
        (gh, gw), cell = geometry.grid, geometry.cell_pixels
        # the map's view first: a view under the pointer reads the map's grid to say where it is
        self.map_view.set_image(result.display, result.region, geometry.grid)
        self.input_view.set_image(result.input_pixels, (0, 0, gw * cell, gh * cell), geometry.grid)
        self.head_grid.set_layout(
            result.num_layers,
            result.num_heads,
            result.thumb_grid,
            result.input_pixels,
            *self.layers.rows(),
        )
        if self._map_fitted():  # a zoomed or panned map keeps its size (and so its zoom)
            self.head_panel.share_height(self.left_splitter, (result.num_layers, result.num_heads))
        self.map_view.set_windows(None)
        if result.class_names:
            self.predictions.set_predictions(
                result.probs,
                result.class_names,
                self._shown_class(),
                scores=result.scores,
                label=result.words.probability,
            )
        else:
            self.predictions.clear_predictions()
        self._update_predictions_title()
        self.stats_panel.set_statistics(
            result.mean_distance,
            result.entropy,
            result.prefix_share,
            result.token_norms,
            result.num_prefix_tokens,
            self.layers.stats_names(),
            result.words.axis,
        )
        self._update_query_widgets()
        self._update_class_label()
        self.request_maps()

    def show_prompts(self, takes_prompts: bool, applied: tuple[str, ...]) -> None:
        """The model takes typed prompts (the box shows) and scores ``applied`` now."""
        self.prompt_box.setVisible(takes_prompts)
        self.prompt_box.set_applied(applied if takes_prompts else ())
        self._update_predictions_title()
        self._update_class_label()

    def _update_predictions_title(self) -> None:
        self._apply_view_state()

    def _apply_view_state(self) -> ViewState:
        """Derive what the view shows from the model's offer and the user's choices
        (``view_state.derive``) and apply it: the method shown, the class, the predictions'
        words. Every map request goes through here, so nothing of another model stays."""
        self.state = derive(
            self.image,
            list(self.controls.methods.values()),
            Choices(self.controls.wanted_method, self.target_class),
            takes_prompts=not self.prompt_box.isHidden(),
            prompts=self.prompt_box.applied,
        )
        if self.controls.methods:
            self.controls.show_method(self.state.method)
        self.controls.class_label.setText(self.state.class_text)
        # no class to go back to on a model without classes: greyed, saying why
        has_class = self.state.shown_class is not None
        self.controls.class_reset.setEnabled(has_class)
        self.controls.class_reset.setToolTip(
            "Explain the top prediction again" if has_class else NO_CLASS_TO_EXPLAIN
        )
        self.predictions_title.setText(self.state.predictions_title)
        if self.predictions.getAxis("bottom").labelText != self.state.predictions_axis:
            self.predictions.setLabel("bottom", self.state.predictions_axis)  # else no repaint
        return self.state

    def _forget_model_views(self) -> None:
        """Another model: drop what was drawn with the last one's grid and layers until this
        one's maps come (the overlay and the head grid's thumbnails), and show this image's
        head statistics and faithfulness rather than a folder's measured with the last model."""
        self.map_view.set_map(None)
        self.stats_panel.show_image()
        self.faithfulness.show_image()

    def apply_maps(self, result: MapsResult) -> None:
        self.maps = result
        self.refresh_display()

    def set_methods(self, methods: list[MethodInfo]) -> None:
        """The method table arrived (at start, after a model change): fill the method list."""
        self.controls.set_methods(methods)
        if self.image is not None:
            self.controls.set_unavailable(self.image.unavailable)
            self.request_maps()  # the method shown may be another now (view_state)

    def needs_gradients(self) -> bool:
        """The shown method needs attention gradients (kept from the analysing pass)."""
        m = self.controls.current_method()
        return m is not None and m.needs_gradients

    # -- faithfulness -----------------------------------------------------------------------------
    def request_faithfulness(self) -> int | None:
        """Curves of the shown method against random for this image, computed by the engine."""
        if self.image is None:
            self.faithfulness.clear("Open an image and a checkpoint first.")
            return None
        name, m = self.controls.method_name(), self.controls.current_method()
        self.faithfulness.set_busy(f"Measuring {m.label if m else name}…")
        values = self.controls.method_values()  # the map on screen (CLS query, top class)
        return self.client.submit(
            "faithfulness", partial(jobs.faithfulness, method=name, params=values)
        )

    def apply_faithfulness(self, result: FaithfulnessResult) -> None:
        info = self.controls.methods.get(result.method)
        names = self.image.class_names if self.image else []
        c = result.target_class
        name = names[c] if 0 <= c < len(names) else str(c)
        self.faithfulness.show_result(result, info.label if info else result.method, name)

    def _faithfulness_stale(self) -> None:
        """Another method is shown: say whose curves these are (measured on request only)."""
        result, m = self.faithfulness.result, self.controls.current_method()
        if result is not None and m is not None and result.method != m.name:
            old = self.controls.methods.get(result.method)
            self.faithfulness.status.setText(
                f"These curves are of {old.label if old else result.method}; press Measure "
                f"faithfulness for {m.label}."
            )

    def faithfulness_failed(self, message: str) -> None:
        self.faithfulness.set_idle(message)

    # -- settings -------------------------------------------------------------------------------
    def save_settings(self, settings: AppSettings) -> None:
        ctl = self.controls
        settings.set("view/colormap", ctl.colormap_name())
        settings.set("view/opacity", ctl.opacity.value())
        settings.set("view/method", ctl.wanted_method)  # the user's choice, not a stand-in
        settings.set("view/head_scale", self.head_panel.scale_name())

    def restore_settings(self, settings: AppSettings) -> None:
        ctl = self.controls
        cmap = settings.get("view/colormap", "viridis", str)
        if ctl.colormap.findText(cmap) >= 0:
            ctl.colormap.setCurrentText(cmap)
        ctl.opacity.setValue(settings.get("view/opacity", 60, int))
        ctl.select_method(settings.get("view/method", ATTENTION, str))
        self.head_panel.set_scale_name(settings.get("view/head_scale", "shared", str))

    def export_request(self) -> dict[str, Any]:
        """What an export of the current view needs: the map settings, the map on screen, the
        colour map, opacity and the head grid's scale (keyword arguments of ``jobs.export``)."""
        values, _ = self.current_map()
        return {
            "params": self.controls.params(self.query, self.target_class),
            "current_map": None if values is None else values.copy(),
            "colormap": self.controls.colormap_name(),
            "opacity": self.controls.opacity_value(),
            "per_head": self.head_grid.per_head,  # the heads PNG on the grid's scale
        }

    # -- user choices ---------------------------------------------------------------------------
    def request_maps(self) -> int | None:
        """New maps for the current settings: computed here when they are plain attention of
        an attention array the window holds (no round trip), else by the engine."""
        if self.image is None:
            return None
        self._apply_view_state()
        params = self.controls.params(self.query, self.target_class)
        if params.method == ATTENTION and self.image.attention is not None:
            self.client.supersede("maps")
            self.apply_maps(self._local_maps(params))
            return None
        return self.client.submit("maps", partial(jobs.compute_maps, params=params))

    def _local_maps(self, params: MapParams) -> MapsResult:
        image = self.image
        assert image is not None and image.attention is not None
        head, mean, prefix = jobs.raw_maps(
            image.attention, params.query, image.grid, image.num_prefix_tokens
        )
        target = image.top_class if params.target_class is None else params.target_class
        return MapsResult(
            params=params,
            head_maps=head,
            mean_maps=mean,
            method_map=None,
            target_class=target,
            prefix_attention=prefix,
            levels=jobs.maps_levels(head, mean),
        )

    def set_query(self, patch: tuple[int, int] | None) -> None:
        self.query = patch
        self._update_query_widgets()
        self.request_maps()

    def show_head(self, layer: int, head: int) -> None:
        """A tile of the head grid clicked: that layer's head large (its attention)."""
        self.controls.select(layer, head)
        if self.controls.method_name() != ATTENTION:
            self.controls.select_method(ATTENTION)

    def set_target_class(self, index: int | None) -> None:
        self.target_class = index
        self._update_class_label()
        self.predictions.set_selected(self._shown_class())
        self.request_maps()

    def _shown_class(self) -> int | None:
        if self.image is None:
            return None
        return shown_class(self.target_class, self.image.top_class, self.image.class_names)

    # -- drawing ----------------------------------------------------------------------------------
    def current_map(self) -> tuple[np.ndarray | None, tuple[float, float] | None]:
        """The map of the large view and its colour levels (None before results arrive)."""
        m = self.maps
        if m is None:
            return None, None
        layer, head = self.controls.selected_layer(), self.controls.selected_head()
        layer = min(layer, m.head_maps.shape[0] - 1)
        if m.params.method == ATTENTION:  # at the layer's own grid
            return m.layer_map(layer, head), None
        info = self.controls.methods.get(m.params.method)
        if m.method_map is None:
            return None, None
        if info is not None and info.scaling != "none":  # 0..1 by the method's definition
            return m.method_map, (0.0, 1.0)
        return m.method_map, None

    def refresh_display(self) -> None:
        """Apply the current maps with the current layer, head, colour map and opacity."""
        m = self.maps
        if m is None or self.image is None:
            return
        cmap, opacity = self.controls.colormap_name(), self.controls.opacity_value()
        values, levels = self.current_map()
        self.map_view.set_title(self._titled_intervention(self._map_title(m)))
        scale = map_scale(values, levels, self._query_cell(m, values))
        self.map_view.set_map(values, scale.levels, cmap, opacity)
        error = m.error if values is None else None
        notes = (self.state.method_brief, error, scale.note)
        details = (self.state.method_note, error, scale.note)  # in full: the note's tooltip
        self.map_view.set_message(
            "\n\n".join(n for n in notes if n), "\n\n".join(n for n in details if n)
        )
        self.head_grid.set_maps(m.head_maps, m.mean_maps, m.levels, cmap, opacity)
        self.head_grid.set_selection(self.controls.selected_layer(), self.controls.selected_head())
        if self.layers is not None:
            self.layers.draw(self.map_view, m, self.controls.selected_layer())
        self._update_prefix_label()
        if m.error:
            self.hoverText.emit(m.error)
        elif self._hovered is not None:  # the value under the pointer is the new map's
            self._on_hover((*self._hovered, self.map_view.value_at(*self._hovered)))

    def _query_cell(self, m: MapsResult, values: np.ndarray | None) -> tuple[int, int] | None:
        """The query's cell on the shown map's grid when the map is the query's (it is left out
        of the colour scale), else None."""
        info = self.controls.methods.get(m.params.method)
        if self.query is None or values is None or self.image is None:
            return None
        if info is not None and not info.queries:
            return None
        if self.layers is not None and not self.layers.queried(
            m, self.controls.selected_layer(), self.query
        ):  # the shown layer's query is its prefix token: the clicked cell is a key like any
            return None
        if tuple(values.shape) != tuple(self.image.grid):
            return None
        return self.query

    def _map_title(self, m: MapsResult) -> str:
        """What the large view shows, in words: method, class, query, layers and settings."""
        layer, head = self.controls.selected_layer(), self.controls.selected_head()
        assert self.layers is not None and self.image is not None
        info = self.controls.methods.get(m.params.method)
        if m.params.method == ATTENTION or info is None:
            return self.layers.attention_title(m, layer, head, self.query)
        kind_words = self.layers.method_words(m, m.params.method, self.query)
        if kind_words is not None:  # the kind words what the method starts from and spans
            picker = next(filter(from_layer_picker, info.parameters), None)
            if picker is not None:  # a CAM: the layer it read
                chosen = str(m.params.params().get(picker.name, picker.default))
                kind_words += f" · target layer {self.controls.cam_layer.words(chosen)}"
            return f"{info.label} · {kind_words}"
        layers = self.image.num_layers
        words = self.image.words
        query = (
            words.title_query_none
            if self.query is None
            else words.title_query.format(**self.layers.query_fields(self.query, m, layer))
        )
        values = m.params.params()
        unused = self.image.ignored_params.get(m.params.method, {})  # the model ignores them
        parts = [info.label]
        if info.needs_head:
            named = class_words(m.target_class, self.image.class_names)
            if named is not None:  # a model without the class: none named
                parts.append(named)
        parts.append(query if info.queries else "query CLS (fixed)")
        for p in info.parameters:
            if p.name in unused:  # a title names only what the map was made with
                continue
            value = values.get(p.name, p.default)
            if p.per == "head":
                parts.append("mean of heads" if value == -1 else f"head {value}")
            elif p.per == "layer" and p.name == "layer":  # counted from 0 (docs/window.md)
                parts.append(f"layer {layers - 1 if value == -1 else value} of 0–{layers - 1}")
            elif p.per == "layer":  # a start layer: the layers the method runs through
                parts.append(f"layers {value}–{layers - 1}")
            elif p.type == "float":
                parts.append(f"{p.label.lower()} {value:.2f}")
            elif from_layer_picker(p):  # a CAM's layer, ``auto`` with the layer it reads
                parts.append(f"{p.label.lower()} {self.controls.cam_layer.words(str(value))}")
            else:
                parts.append(f"{p.label.lower()} {value}")
        return " · ".join(parts)

    def _titled_intervention(self, title: str) -> str:
        """``title`` naming the heads knocked out of the model the map was made on (DESIGN §5),
        after the method: a title too long for the view loses its last parts first."""
        knocked = (
            "" if self.image is None else knocked_words(self.image.knocked_out, self.image.ablation)
        )
        if not knocked:
            return title
        first, *rest = title.split(" · ", 1)
        return " · ".join([first, knocked, *rest])

    def _update_query_widgets(self) -> None:
        self.input_view.set_query(self.query)
        self.map_view.set_query(self.query)
        has_cls = self.image is not None and self.image.num_prefix_tokens > 0
        reset = "" if self.image is None else self.image.words.query_reset
        self.controls.query_reset.setText(
            reset or ("Reset to CLS" if has_cls else "Reset to the mean")
        )
        if self.layers is not None:
            self.controls.query_label.setText(self.layers.query_text(self.query))
        elif self.query is None:
            self.controls.query_label.setText("mean of patches")

    def _update_class_label(self) -> None:
        self._apply_view_state()

    def _update_prefix_label(self) -> None:
        """The attention the query gives the prefix tokens in the selected layer and head; under
        a method whose map reads neither, the line says it is the head grid's outlined tile's."""
        if self.maps is None or self.image is None or self.image.num_prefix_tokens == 0:
            self.controls.prefix_label.setText("")
            return
        c = self.controls
        layer, head = c.selected_layer(), c.selected_head()
        pa = self.maps.prefix_attention[min(layer, self.maps.prefix_attention.shape[0] - 1)]
        heads = np.isfinite(pa).all(axis=1)  # NaN rows: heads a layer lacks (fewer heads)
        share = pa[heads].mean(axis=0) if head == MEAN and heads.any() else pa[head]
        read = all(
            map_reads(c.current_method(), c.param_panel.ignored, n) for n in ("layer", "head")
        )
        # the map reads neither: the line measures the head grid's outlined tile, said (its
        # layer and head in the tooltip; three lines must hold it in a 1366-px window's panel)
        where = "this layer" if read else "the outlined tile"
        c.prefix_label.setToolTip(
            ""
            if read
            else f"The head grid's outlined tile: {c.layer.text()}, {c.head.currentText()} "
            "(the Grid layer and Grid head selectors)"
        )
        if not np.isfinite(share.sum()):  # NaN: the layer has no prefix token for this query
            c.prefix_label.setText(f"Prefix tokens: none in {where} for this query.")
            return
        over = self.image.prefix_share[layer]  # (H,) each head's share over all patch queries
        over = over if head == MEAN else over[head : head + 1]
        over = over[np.isfinite(over)]
        overall = (  # a layer whose one query is a prefix token (a cross-attention) has none
            f"{over.mean():.1%} over all patch queries" if over.size else "no patch query here"
        )
        if read:
            c.prefix_label.setText(
                f"Prefix tokens: {share.sum():.1%} of this query's attention in this layer "
                f"({overall})."
            )
        else:
            c.prefix_label.setText(
                f"Prefix tokens, outlined tile: {share.sum():.1%} of this query's attention "
                f"({overall})."
            )

    def _on_hover(self, info: object) -> None:
        """A patch under the pointer (either view): its place and the map's value there."""
        if info is None or self.image is None:
            self._hovered = None
            self.hoverText.emit("")
            return
        if not isinstance(info, tuple) or len(info) != 3:
            return
        r, c, _ = info
        self._hovered = (r, c)
        value = self.map_view.value_at(r, c)
        mr, mc, (mh, mw) = self.map_view.map_cell(r, c)
        if (mh, mw) == self.image.grid:
            text = f"patch row {r}, col {c}, index {r * mw + c}"
        else:  # a coarser map (a layer's own tokens): its own cell, as the title counts them
            text = f"token row {mr}, col {mc} of {mh}×{mw}, index {mr * mw + mc}"
        if np.isfinite(value):
            text += f", value {value:.4g}"
        self.hoverText.emit(text)

    def _on_head_hover(self, info: tuple[int, int, float] | None) -> None:
        describe = self.head_grid.describe if self.layers is None else self.layers.describe
        self.hoverText.emit("" if info is None else describe(info))

    def _map_fitted(self) -> bool:
        """The large view shows its whole image, filling the view one way: as fitted, not
        zoomed or panned by the user."""
        vb = self.map_view.vb
        (x0, x1), (y0, y1) = vb.viewRange()
        r = self.map_view.image.mapRectToView(self.map_view.image.boundingRect())
        if r.isEmpty() or x1 <= x0 or y1 <= y0:
            return True
        slack = 0.05 * max(r.width(), r.height())
        whole = x0 <= r.left() + slack and x1 >= r.right() - slack
        whole = whole and y0 <= r.top() + slack and y1 >= r.bottom() - slack
        return whole and max(r.width() / (x1 - x0), r.height() / (y1 - y0)) > 0.9
