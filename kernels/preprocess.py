"""delta = rowsum(dO * O) in fp32, the term every backward design subtracts inside dS."""
import torch
import triton
import triton.language as tl

from kernels.common import cdiv, head_block, strides
from kernels.launch import launch


@triton.jit
def _delta_kernel(O, DO, DELTA,
                  stride_ob, stride_on, stride_oh, stride_od,
                  stride_dob, stride_don, stride_doh, stride_dod,
                  seq_q, heads,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """Grid (cdiv(Nq, BLOCK_M), B * H). DELTA is [B, H, Nq] fp32."""
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


def attention_delta(o, do, BLOCK_M: int = 64) -> torch.Tensor:
    """o, do [B, Nq, H, D] -> delta [B, H, Nq] fp32."""
    batch, seq_q, heads, head_dim = o.shape
    delta = torch.empty((batch, heads, seq_q), device=o.device, dtype=torch.float32)
    grid = (cdiv(seq_q, BLOCK_M), batch * heads)
    launch(_delta_kernel, grid, o, do, delta, *strides(o), *strides(do), seq_q, heads,
                        HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_D=head_block(head_dim))
    return delta
