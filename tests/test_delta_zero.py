"""The delta launch zeroes a design's fp32 dQ accumulator (kernels/preprocess.py, issue 44: one launch fewer per call
than torch.zeros): every element of the buffer, whatever its size against the delta grid, and delta unchanged."""
import pytest
import torch

from kernels.preprocess import ZERO_BLOCK, attention_delta, flat


def _delta(o, do):
    return (o.float() * do.float()).sum(-1).transpose(1, 2)  # [B, H, Nq]


@pytest.mark.parametrize("shape,buffer", [
    ((2, 70, 3, 16), (2 * 3 * 72, 16)),  # ws's [B * H * rows, tile_dim(D)]: more rows than Nq
    ((1, 5, 2, 32), (3 * ZERO_BLOCK + 17,)),  # more elements than the programs' first steps cover
    ((2, 130, 2, 24), (2, 130, 2, 24)),  # atomic's accumulator like q
    ((1, 64, 1, 16), (1, 1, 64, 16)),
])
def test_the_delta_launch_zeroes_the_whole_buffer(device, shape, buffer):
    gen = torch.Generator().manual_seed(0)
    o, do = (torch.randn(shape, generator=gen).to(device) for _ in range(2))
    zero = torch.full(buffer, float("nan"), device=device)
    delta = attention_delta(o, do, zero=zero)
    assert torch.equal(zero, torch.zeros_like(zero))
    torch.testing.assert_close(delta, _delta(o, do), rtol=1e-5, atol=1e-5)


def test_a_permuted_dense_buffer_is_zeroed_in_place(device):
    """atomic's accumulator of a bhnd call: empty_like(q) keeps q's permuted strides."""
    o, do = (torch.randn(1, 40, 3, 16, device=device) for _ in range(2))
    zero = torch.full((1, 3, 40, 16), float("nan"), device=device).transpose(1, 2)
    assert flat(zero)
    attention_delta(o, do, zero=zero)
    assert not zero.isnan().any() and not zero.any()


def test_a_buffer_that_is_not_flat_is_zeroed_by_aten(device):
    o, do = (torch.randn(1, 40, 2, 16, device=device) for _ in range(2))
    base = torch.full((2, 40, 16), float("nan"), device=device)
    zero = base[:, :, :8]  # gaps between rows: zeroing storage from its start would be wrong
    assert not flat(zero) and not flat(base[1])
    attention_delta(o, do, zero=zero)
    assert not zero.any() and base[:, :, 8:].isnan().all()
