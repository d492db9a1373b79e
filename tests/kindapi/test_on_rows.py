"""``OnRows.put`` (DESIGN §3): a head replaced in some rows of a batch; rows outside the batch
are a ValueError naming the row, on the host and on a device alike, and nothing is written."""

from __future__ import annotations

import pytest
import torch

from vitviz.kindapi import OnRows

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("row", [3, -1])
def test_a_row_outside_the_batch_is_named(device: str, row: int) -> None:
    heads = torch.ones(3, 2, 4, 5, device=device)
    for value in (None, torch.zeros(2, 4, 5, device=device)):
        with pytest.raises(ValueError, match=rf"batch of 3 are needed \(row {row} is outside"):
            OnRows(torch.tensor([0, row], device=device), value).put(heads, 1, "layer 0 head 1")
    assert bool((heads == 1).all())  # nothing written


@pytest.mark.parametrize("device", DEVICES)
def test_rows_in_the_batch_are_replaced_there_alone(device: str) -> None:
    heads = torch.ones(3, 2, 4, 5, device=device)
    OnRows(torch.tensor([2, 0], device=device), torch.full((2, 4, 5), 7.0)).put(heads, 1, "x")
    assert heads[[0, 2], 1].eq(7).all() and heads[1].eq(1).all() and heads[:, 0].eq(1).all()
    OnRows(torch.tensor([1], device=device)).put(heads, 0, "x")
    assert heads[1, 0].eq(0).all() and heads[[0, 2], 0].eq(1).all()
