"""A relative position bias on a grid other than the one it was learnt on (DESIGN §3).

A learnt table is resampled as transformers' BEiT and Data2Vec-vision resample it at another
input size (``BeitRelativePositionBias.forward``: the offsets bilinear, align_corners=False,
the three CLS rows kept, the index rebuilt for the new grid); an MLP bias is evaluated at the
new grid's offsets, as timm's ``RelPosMlp.set_window_size`` makes it. Compared with the
libraries' own modules on random weights, square and non-square grids, smaller and larger.
"""

from __future__ import annotations

import pytest
import torch
from timm.layers import RelPosMlp
from transformers import BeitConfig
from transformers.models.beit.modeling_beit import BeitRelativePositionBias
from zoo_helpers import randomize_

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.layers import Attention
from vitviz.blocks.position_bias import MlpPositionBias, resample_table, table_rows

GRIDS = [(2, 2), (3, 5), (5, 3), (4, 4), (6, 6)]


def _attention_and_beits(dtype: torch.dtype) -> tuple[Attention, BeitRelativePositionBias]:
    """vitviz's attention and transformers' bias module of a BEiT learnt on a 4×4 grid (64 px,
    patch 16, 3 heads), holding the same random table."""
    config = BeitConfig(image_size=64, patch_size=16, num_attention_heads=3)
    theirs = BeitRelativePositionBias(config)
    torch.manual_seed(0)
    theirs.relative_position_bias_table.data.normal_()
    ours = Attention(
        ViTConfig(image_size=64, patch_size=16, dim=12, heads=3, depth=1, rel_pos_bias=True)
    )
    ours.relative_position_bias_table.data.copy_(theirs.relative_position_bias_table.data)
    return ours.to(dtype), theirs.to(dtype)


@pytest.mark.parametrize("grid", GRIDS, ids=[f"{h}x{w}" for h, w in GRIDS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_a_table_is_resampled_as_transformers_beit_resamples_it(
    grid: tuple[int, int], dtype: torch.dtype
) -> None:
    ours, theirs = _attention_and_beits(dtype)
    n = 1 + grid[0] * grid[1]
    with torch.no_grad():
        expected = theirs(grid, interpolate_pos_encoding=True, dim_size=n)[0]  # (heads, n, n)
        got = ours.position_bias(n, grid)
    assert got is not None and got.dtype == dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_on_its_own_grid_the_table_is_itself() -> None:
    table = torch.randn(table_rows((4, 4), cls=True), 3)
    assert resample_table(table, (4, 4), (4, 4), cls=True) is table
    without_cls = torch.randn(table_rows((3, 5), cls=False), 2)
    assert resample_table(without_cls, (3, 5), (3, 5), cls=False) is without_cls


def test_the_cls_rows_are_kept_and_the_offsets_resized() -> None:
    table = torch.randn(table_rows((4, 4), cls=True), 2)
    resized = resample_table(table, (4, 4), (2, 3), cls=True)
    assert resized.shape == (table_rows((2, 3), cls=True), 2)
    torch.testing.assert_close(resized[-3:], table[-3:], rtol=0, atol=0)
    offsets = resample_table(table[:-3], (4, 4), (2, 3), cls=False)  # no CLS: offsets alone
    torch.testing.assert_close(offsets, resized[:-3], rtol=0, atol=0)


@pytest.mark.parametrize("prefix", [0, 1])
def test_the_mlp_bias_at_another_grid_is_timms_at_that_grid(prefix: int) -> None:
    """Learnt on 4×4, evaluated on 3×5: timm's RelPosMlp made for 3×5 (its set_window_size
    keeps the MLP's weights and computes the new offsets) with the same weights."""
    torch.manual_seed(2)
    theirs = randomize_(
        RelPosMlp(window_size=(3, 5), num_heads=3, hidden_dim=8, prefix_tokens=prefix), seed=2
    )
    mine = MlpPositionBias(3, 8, (4, 4), prefix)
    mine.load_state_dict({k.removeprefix("mlp."): v for k, v in theirs.state_dict().items()})
    with torch.no_grad():
        torch.testing.assert_close(mine((3, 5)), theirs.get_bias()[0], rtol=0, atol=1e-6)


def test_a_token_count_that_is_not_the_grids_is_refused_in_one_line() -> None:
    ours, _ = _attention_and_beits(torch.float32)
    with pytest.raises(ValueError, match=r"over 2×2 patches: this input gives another") as caught:
        ours.position_bias(7, (2, 2))
    assert "\n" not in str(caught.value)
