"""dq_finish: the fp32 accumulator scaled into dq, in either row order (ws keeps its rows spread within groups of 8)."""
import pytest
import torch

from kernels.dq_finish import dq_finish, scale_cast
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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_scale_cast_is_mul_then_to_bit_for_bit(device, dtype, layout):
    """atomic's finish (one launch) gives exactly acc.mul_(scale).to(dtype), in acc's strides, for either layout of
    q (zeros_like(q) keeps it); values near rounding ties, large and tiny ones included. bf16 in the interpreter takes
    ATen's path: the interpreter casts fp32 to bf16 by truncation, the GPU's cvt rounds to nearest even."""
    gen = torch.Generator().manual_seed(3)
    shape = (2, 37, 3, 24) if layout == "bnhd" else (2, 3, 37, 24)
    acc = (torch.randn(shape, generator=gen) * torch.logspace(-6, 4, 24)).to(device)
    acc.view(-1)[:64] = torch.arange(64, dtype=torch.float32) * 2 ** -9 + 1  # bf16 / fp16 ties and near-ties
    if layout == "bhnd":
        acc = acc.transpose(1, 2)  # [B, N, H, D] view of a [B, H, N, D] buffer
    scale = 0.0883883461356163
    got = scale_cast(acc.clone(), dtype, scale)
    want = acc.clone().mul_(scale).to(dtype)
    assert got.dtype == dtype and got.stride() == acc.stride()
    assert torch.equal(got.view(torch.uint8) if dtype != torch.float32 else got, want.view(torch.uint8)
                       if dtype != torch.float32 else want)
