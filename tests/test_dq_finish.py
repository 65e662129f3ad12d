"""dq_finish: the fp32 accumulator scaled into dq, in either row order (ws keeps its rows spread within groups of 8)."""
import pytest
import torch

from kernels.dq_finish import dq_finish
from kernels.gluon.ws import dq_rows


def spread_order(seq_q: int) -> torch.Tensor:
    """The accumulator row of each query under ws's order: query 8 g + 4 a + b in row 8 g + 2 b + a."""
    m = torch.arange(seq_q)
    return m - m % 8 + m % 4 * 2 + m % 8 // 4


@pytest.mark.parametrize("seq_q", [1, 7, 13, 64, 77])
@pytest.mark.parametrize("spread_rows", [False, True])
def test_dq_finish_reads_each_query_from_its_row(device, seq_q, spread_rows):
    batch, heads, head_dim, scale = 2, 3, 16, 0.37
    expected = torch.randn(batch, seq_q, heads, head_dim, device=device)  # [B, Nq, H, D]
    rows = dq_rows(seq_q) if spread_rows else seq_q
    acc = torch.randn(batch, heads, rows, head_dim, device=device)  # rows no query owns: noise that must not leak
    order = spread_order(seq_q) if spread_rows else torch.arange(seq_q)
    acc[:, :, order.to(device)] = expected.transpose(1, 2) / scale
    dq = torch.empty(batch, seq_q, heads, head_dim, device=device)
    dq_finish(acc, dq, scale, spread_rows=spread_rows)
    torch.testing.assert_close(dq, expected, rtol=1e-5, atol=1e-5)


def test_spread_order_is_a_permutation_within_groups_of_8():
    order = spread_order(64)
    assert sorted(order.tolist()) == list(range(64))
    assert torch.equal(order // 8, torch.arange(64) // 8)
