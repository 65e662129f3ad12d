"""The last step of every design that accumulates dQ in fp32 (atomic_tma, ws: dq_finish; atomic: scale_cast):
dq = scale * accumulator, in dq's dtype and strides."""
import os

import torch
import triton
import triton.language as tl

from kernels.common import cdiv, flat, strides
from kernels.launch import launch, memo


@triton.jit
def _dq_finish_kernel(DQ_ACC, DQ, stride_dqb, stride_dqn, stride_dqh, stride_dqd, seq_q, acc_rows, heads, sm_scale,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                      SPREAD_ROWS: tl.constexpr):
    """Grid (cdiv(Nq, BLOCK_M), B * H): dq = sm_scale * DQ_ACC[..., :D] in dq's dtype and strides; DQ_ACC has
    acc_rows >= Nq rows per (batch, head). SPREAD_ROWS: query 8 g + 4 a + b is in row 8 g + 2 b + a (ws's
    accumulator, `_bank_spread_rows`). Row-wise, so a packed batch is one sequence of total_q rows (B = 1); rows
    no program reached (queries of a document without keys) stay 0."""
    i_m = tl.program_id(0)
    i_bh = tl.program_id(1)
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_md = (o_m[:, None] < seq_q) & (o_d[None, :] < HEAD_DIM)
    if SPREAD_ROWS:
        o_row = o_m - o_m % 8 + o_m % 4 * 2 + o_m % 8 // 4
    else:
        o_row = o_m
    b_acc = tl.load(DQ_ACC + i_bh.to(tl.int64) * acc_rows * BLOCK_D + o_row[:, None] * BLOCK_D + o_d[None, :],
                    mask=m_md, other=0.)  # [BM, BD]
    tl.store(DQ + (i_bh // heads) * stride_dqb + (i_bh % heads) * stride_dqh + o_m[:, None] * stride_dqn
             + o_d[None, :] * stride_dqd, (b_acc * sm_scale).to(DQ.dtype.element_ty), mask=m_md)


def dq_finish(dq_acc: torch.Tensor, dq: torch.Tensor, scale: float, BLOCK_M: int = 64,
              spread_rows: bool = False) -> None:
    """dq_acc [B, H, rows >= Nq, BLOCK_D] fp32, contiguous (BLOCK_D >= D, a power of two), or the same memory as
    [B * H * rows, BLOCK_D] (ws's, no view per call) -> dq [B, Nq, H, D] = scale * dq_acc[..., :D]; spread_rows: the
    accumulator's rows reordered within groups of 8 (ws)."""
    slot = memo("dq_finish")  # a plan's phase: its key fixes the shapes and strides
    if slot:
        if slot["grid"] is not None:
            launch(_dq_finish_kernel, slot["grid"], dq_acc, dq, *slot["args"], scale, **slot["fixed"])
        return
    batch, seq_q, heads, head_dim = dq.shape
    grid = (cdiv(seq_q, BLOCK_M), batch * heads) if seq_q > 0 and batch * heads > 0 else None
    if grid is not None:
        block_d = dq_acc.shape[-1]
        args = (*strides(dq), seq_q, dq_acc.numel() // (batch * heads * block_d), heads)
        fixed = dict(HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_D=block_d, SPREAD_ROWS=spread_rows, num_warps=4)
        if slot is not None:
            slot.update(grid=grid, args=args, fixed=fixed)
        launch(_dq_finish_kernel, grid, dq_acc, dq, *args, scale, **fixed)
    elif slot is not None:
        slot["grid"] = None


@triton.jit
def _scale_cast_kernel(ACC, OUT, numel, sm_scale, BLOCK: tl.constexpr):
    """Grid (cdiv(numel, BLOCK),): OUT = sm_scale * ACC in OUT's dtype, element by element in storage order."""
    o_i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < numel
    b_acc = tl.load(ACC + o_i, mask=m_i, other=0.)  # [BLOCK] fp32
    tl.store(OUT + o_i, (b_acc * sm_scale).to(OUT.dtype.element_ty), mask=m_i)


def scale_cast(acc: torch.Tensor, dtype: torch.dtype, scale: float, BLOCK: int = 1024) -> torch.Tensor:
    """acc fp32 (atomic's [B, Nq, H, D] accumulator, zeros_like(q): non-overlapping and dense) -> scale * acc in
    dtype with acc's strides: what `acc.mul_(scale).to(dtype)` gives, bit for bit (an fp32 product rounded to
    nearest even), in one launch instead of two ATen kernels and without writing acc (issue 44: host cost)."""
    out = torch.empty_like(acc, dtype=dtype)
    dense = out.stride() == acc.stride() and flat(acc) and flat(out)
    # the interpreter casts fp32 to bf16 by truncation where the GPU rounds to nearest even: ATen's path there
    if not dense or (dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET", "0") == "1"):
        return acc.mul_(scale).to(dtype)
    if acc.numel():
        launch(_scale_cast_kernel, (cdiv(acc.numel(), BLOCK),), acc, out, acc.numel(), scale, BLOCK=BLOCK,
               num_warps=4)
    return out
