"""Every matrix-product candidate the kernels tool times computes x @ W (to float32 rounding), and the
batch path's prepacked product is batch invariant: a row's output is bitwise the same whatever the
other rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from playground.models import kernels
from playground.tools.kernels import CANDIDATES, prepare
from tests.float32_bounds import assert_within, sum_bound


@pytest.mark.parametrize("name", sorted(CANDIDATES))
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_every_candidate_computes_the_same_product(name, rows):
    torch.manual_seed(rows)
    weight, x = torch.randn(96, 160), torch.randn(rows, 96)
    with torch.inference_mode():
        got = CANDIDATES[name](x, prepare(name, weight)).numpy()
    exact = x.double().numpy() @ weight.double().numpy()
    magnitude = np.abs(x.double().numpy()) @ np.abs(weight.double().numpy())
    assert got.shape == (rows, 160)
    assert_within(got, exact, sum_bound(magnitude, 96), f"{name} with {rows} rows")


def test_the_packed_product_is_batch_invariant():
    torch.manual_seed(0)
    weight, x = torch.randn(64, 96), torch.randn(16, 64)
    with torch.inference_mode():
        packed = kernels.pack(weight)
        alone = kernels.packed_matmul(x[:1], packed, 96)
        for n in range(1, 17):
            assert torch.equal(kernels.packed_matmul(x[:n], packed, 96)[0], alone[0]), n
