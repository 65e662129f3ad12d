"""Sums of partial gradients (ws's group_split: one dK / dV partial per slice of a GQA group's query heads):
out[r, :] = sum_g partials[r, g, :], in out's dtype. One pass over the partials, for the sums torch would make in
two (a reduction, then a cast) with a [rows, G, D] view."""
import torch
import triton
import triton.language as tl

from kernels.common import cdiv
from kernels.launch import launch, memo


@triton.jit
def _add_partials_kernel(PARTIALS, OUT, rows, SPLIT: tl.constexpr, DIM: tl.constexpr, BLOCK_R: tl.constexpr,
                         BLOCK_D: tl.constexpr):
    """Grid (cdiv(rows, BLOCK_R),): PARTIALS [rows, SPLIT, DIM] contiguous (added in fp32) -> OUT [rows, DIM]."""
    o_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    o_d = tl.arange(0, BLOCK_D)
    inside = (o_r[:, None] < rows) & (o_d[None, :] < DIM)
    row = o_r[:, None].to(tl.int64)
    total = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)  # [BR, BD]
    for g in tl.static_range(SPLIT):
        total += tl.load(PARTIALS + (row * SPLIT + g) * DIM + o_d[None, :], mask=inside, other=0.).to(tl.float32)
    tl.store(OUT + row * DIM + o_d[None, :], total.to(OUT.dtype.element_ty), mask=inside)


def add_partials(partials: torch.Tensor, split: int, dtype) -> torch.Tensor:
    """partials [B, N, H * split, D] contiguous, fp32 or 16-bit (head h * split + g: slice g of head h) -> [B, N, H, D]
    in dtype, the sums over each head's slices (in fp32)."""
    batch, seq, split_heads, dim = partials.shape
    out = torch.empty(batch, seq, split_heads // split, dim, device=partials.device, dtype=dtype)
    rows = out.numel() // dim if dim else 0
    slot = memo("add_partials")
    if slot:
        if slot["grid"] is not None:
            launch(_add_partials_kernel, slot["grid"], partials, out, rows, **slot["fixed"])
        return out
    block_d = triton.next_power_of_2(dim)
    block_r = max(1, 4096 // block_d)
    grid = (cdiv(rows, block_r),) if rows else None
    fixed = dict(SPLIT=split, DIM=dim, BLOCK_R=block_r, BLOCK_D=block_d, num_warps=4)
    if slot is not None:
        slot.update(grid=grid, fixed=fixed)
    if grid is not None:
        launch(_add_partials_kernel, grid, partials, out, rows, **fixed)
    return out
