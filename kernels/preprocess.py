"""delta = rowsum(dO * O) in fp32, the term every backward design subtracts inside dS."""
import torch
import triton
import triton.language as tl

from kernels.common import cdiv, flat, head_block, strides
from kernels.launch import launch, memo


@triton.jit
def _delta_kernel(O, DO, DELTA, ZERO,
                  stride_ob, stride_on, stride_oh, stride_od,
                  stride_dob, stride_don, stride_doh, stride_dod,
                  seq_q, heads, zero_numel, zero_chunk,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ZERO_BLOCK: tl.constexpr):
    """Grid (cdiv(Nq, BLOCK_M), B * H). DELTA is [B, H, Nq] fp32. ZERO_BLOCK > 0: also zero ZERO, an fp32 buffer of
    zero_numel elements, each program its zero_chunk of them (a multiple of ZERO_BLOCK; the chunks cover it)."""
    i_m = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // heads
    i_h = i_bh % heads
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_md = (o_m[:, None] < seq_q) & (o_d[None, :] < HEAD_DIM)
    b_o = tl.load(O + i_b * stride_ob + i_h * stride_oh + o_m[:, None] * stride_on + o_d[None, :] * stride_od,
                  mask=m_md, other=0.).to(tl.float32)  # [BM, BD]
    b_do = tl.load(DO + i_b * stride_dob + i_h * stride_doh + o_m[:, None] * stride_don + o_d[None, :] * stride_dod,
                   mask=m_md, other=0.).to(tl.float32)  # [BM, BD]
    tl.store(DELTA + i_bh * seq_q + o_m, tl.sum(b_o * b_do, 1), mask=o_m < seq_q)
    if ZERO_BLOCK > 0:
        start = (i_bh * tl.num_programs(0) + i_m).to(tl.int64) * zero_chunk
        for offset in range(0, zero_chunk, ZERO_BLOCK):
            o_z = start + offset + tl.arange(0, ZERO_BLOCK)
            tl.store(ZERO + o_z, tl.zeros([ZERO_BLOCK], dtype=tl.float32), mask=o_z < zero_numel)


ZERO_BLOCK = 1024  # elements a program zeroes per step


def attention_delta(o, do, BLOCK_M: int = 64, zero: torch.Tensor | None = None) -> torch.Tensor:
    """o, do [B, Nq, H, D] -> delta [B, H, Nq] fp32. zero: an fp32 buffer the same launch fills with zeros (a design's
    dQ accumulator: one launch fewer than torch.zeros; issue 44), whose elements fill its storage from its start (a
    fresh contiguous tensor, or a fresh empty_like of a dense one)."""
    slot = memo("attention_delta")  # a plan's phase: its key fixes the shapes, strides and the buffer's layout
    if slot and (zero is None) == (slot["numel"] is None):
        delta = torch.empty(slot["delta_shape"], device=o.device, dtype=torch.float32)
        if slot["zero_"]:
            zero.zero_()
        numel = slot["numel"]
        launch(_delta_kernel, slot["grid"], o, do, delta, delta if not numel else zero, *slot["args"], **slot["fixed"])
        return delta
    batch, seq_q, heads, head_dim = o.shape
    delta = torch.empty((batch, heads, seq_q), device=o.device, dtype=torch.float32)
    grid = (cdiv(seq_q, BLOCK_M), batch * heads)
    numel = 0 if zero is None else zero.numel()
    # ATen's fill where nothing launches or the buffer is not one fp32 block from its pointer
    filled = bool(numel) and (grid[0] * grid[1] == 0 or zero.dtype != torch.float32 or not flat(zero))
    if filled:
        zero.zero_()
        numel = 0
    chunk = cdiv(cdiv(numel, max(grid[0] * grid[1], 1)), ZERO_BLOCK) * ZERO_BLOCK
    args = (*strides(o), *strides(do), seq_q, heads, numel, chunk)
    fixed = dict(HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_D=head_block(head_dim),
                 ZERO_BLOCK=ZERO_BLOCK if numel else 0)
    if slot is not None:  # zero_: the buffer goes through ATen's fill (slot["numel"] None: no buffer)
        slot.update(delta_shape=(batch, heads, seq_q), grid=grid, args=args, fixed=fixed,
                    numel=None if zero is None else numel, zero_=filled)
    launch(_delta_kernel, grid, o, do, delta, delta if numel == 0 else zero, *args, **fixed)
    return delta

