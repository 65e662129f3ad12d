"""The shared forward: O and the base-2 log-sum-exp that every backward variant reads.

Scores are pre-scaled by scale * LOG2E so the softmax runs on exp2. A row that sees no key
(causal with Nq > Nk) gets O = 0 and LSE = +inf, so the backward gives it zero probability.
V and O have a head dim of their own (HEAD_DIM_V, MLA's 192 / 128). A learnable sink (issue 47; SINK2 [H] fp32,
the sink in base-2 units) starts each row's running maximum at it with one term exp2(0) = 1 in the denominator:
the LSE then carries it and the backward's P = exp2(S - LSE) needs nothing else. A row that sees no key then
gets O = 0 and LSE = the sink.
"""
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels.common import (LOG2E, Strides, band_blocks, cdiv, document_block, gate_values, head_block, modifier_args,
                            modify_scores, score_mask, strides)
from kernels.sink import sink_logits2
from kernels.varlen import UNIFORM_ARGS
from kernels.launch import launch, memo


class ForwardTensors(NamedTuple):
    q: torch.Tensor  # [B, Nq, H, D]
    k: torch.Tensor  # [B, Nk, Hkv, D]
    v: torch.Tensor  # [B, Nk, Hkv, Dv]
    o: torch.Tensor  # [B, Nq, H, Dv]
    lse: torch.Tensor  # [B, H, Nq] fp32, base 2


class ForwardStrides(NamedTuple):
    q: Strides
    k: Strides
    v: Strides
    o: Strides


class ForwardSizes(NamedTuple):
    seq_q: int
    seq_k: int
    heads: int
    group: int  # query heads per kv head
    qk_scale: float  # scale * log2(e)


@triton.jit
def _fwd_step(state, rows, head, strides, start_n, seq_q, seq_k, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
              MASK_CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
              WINDOW_LEFT: tl.constexpr = -1, WINDOW_RIGHT: tl.constexpr = -1,
              SOFTCAP: tl.constexpr = 0.0, GATED: tl.constexpr = False,
              HEAD_DIM_V: tl.constexpr = 0, BLOCK_DV: tl.constexpr = 0):
    """One online-softmax update of a [BLOCK_M] query block with keys [start_n, start_n + BLOCK_N).
    state: (acc [BM, BDV] fp32, running max [BM], running sum [BM]) -> the updated state. rows: (o_m [BM] the
    block's query indices, q [BM, BD], gq [BM] its gate values). head: (K, V, G) moved to the kv head (G the query
    head's gate cumsum). strides: ForwardStrides. Score modifiers (kernels.common.modify_scores): SOFTCAP, GATED,
    and the window mask where WINDOW_LEFT / WINDOW_RIGHT >= 0."""
    b_acc, b_m, b_l = state
    o_m, b_q, b_gq = rows
    K, V, G = head
    s_k, s_v = strides.k, strides.v
    o_n = start_n + tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_n = o_n < seq_k
    m_d = o_d < HEAD_DIM
    b_kT = tl.load(K + o_n[None, :] * s_k.n + o_d[:, None] * s_k.d,
                   mask=m_n[None, :] & m_d[:, None], other=0.)  # [BD, BN]
    b_s = tl.dot(b_q, b_kT, input_precision=DOT_PRECISION) * qk_scale  # [BM, BD] @ [BD, BN] -> [BM, BN]
    if SOFTCAP > 0 or GATED:
        b_gk = gate_values(G, o_n, seq_k, GATED)  # [BN]
        b_s, _ = modify_scores(b_s, b_gq[:, None], b_gk[None, :], SOFTCAP, GATED)
    b_s = tl.where(score_mask(o_m[:, None], o_n[None, :], seq_q, seq_k, MASK_CAUSAL, True, True,
                              WINDOW_LEFT, WINDOW_RIGHT), b_s, float("-inf"))
    b_m_new = tl.maximum(b_m, tl.max(b_s, 1))  # [BM]
    b_m_use = tl.where(b_m_new == float("-inf"), 0., b_m_new)  # no (-inf) - (-inf) on empty rows
    b_p = tl.math.exp2(b_s - b_m_use[:, None])  # [BM, BN]
    b_alpha = tl.math.exp2(b_m - b_m_use)  # [BM]
    b_l = b_l * b_alpha + tl.sum(b_p, 1)
    o_dv = tl.arange(0, BLOCK_DV)
    b_v = tl.load(V + o_n[:, None] * s_v.n + o_dv[None, :] * s_v.d,
                  mask=m_n[:, None] & (o_dv[None, :] < HEAD_DIM_V), other=0.)  # [BN, BDV]
    b_acc = b_acc * b_alpha[:, None] + tl.dot(b_p.to(b_v.dtype), b_v, input_precision=DOT_PRECISION)  # [BM, BDV]
    return b_acc, b_m_new, b_l  # the new state


@triton.jit
def _fwd_kernel(tensors, strides, sizes, docs, G, SINK2,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                CAUSAL: tl.constexpr, IS_VARLEN: tl.constexpr, DOT_PRECISION: tl.constexpr,
                WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, GATED: tl.constexpr,
                HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, HAS_SINK: tl.constexpr):
    """Grid (cdiv(Nq, BLOCK_M), B * H). tensors: ForwardTensors (LSE [B, H, Nq] fp32, base 2), strides:
    ForwardStrides, sizes: ForwardSizes, docs: kernels.varlen.Documents. IS_VARLEN: B = 1, LSE [1, H, total_q],
    and the first axis runs over the (document, query block) pairs of docs.block_indices.
    Score modifiers: G [B, H, Nq] fp32 (LSE's layout) the gate's cumsum when GATED; a window
    (WINDOW_LEFT / WINDOW_RIGHT >= 0) walks only the key blocks inside the band (kernels.common.band_blocks).
    HEAD_DIM_V / BLOCK_DV: V's and O's head dim and register width. HAS_SINK: SINK2 [H] fp32, the sink in base-2
    units, seeds each row's maximum and denominator (module doc)."""
    Q, K, V, O, LSE = tensors
    seq_q, seq_k, heads, group, qk_scale = sizes
    qk_scale = tl.cast(qk_scale, tl.float32)  # an fp64 scalar (a caller's SymFloat) must not make b_m fp64 in the loop
    i_m = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // heads
    i_h = i_bh % heads
    i_hk = i_h // group
    stride_lse = seq_q
    if IS_VARLEN:
        i_m, bos_q, seq_q, bos_k, seq_k = document_block(docs, i_m)
        Q += bos_q * strides.q.n
        O += bos_q * strides.o.n
        LSE += bos_q
        if GATED:
            G += bos_q
        K += bos_k * strides.k.n
        V += bos_k * strides.v.n
    start_m = i_m * BLOCK_M
    o_m = start_m + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_md = (o_m[:, None] < seq_q) & (o_d[None, :] < HEAD_DIM)
    o_dv = tl.arange(0, BLOCK_DV)
    m_mdv = (o_m[:, None] < seq_q) & (o_dv[None, :] < HEAD_DIM_V)
    b_q = tl.load(Q + i_b * strides.q.b + i_h * strides.q.h + o_m[:, None] * strides.q.n + o_d[None, :] * strides.q.d,
                  mask=m_md, other=0.)  # [BM, BD]
    K += i_b * strides.k.b + i_hk * strides.k.h
    V += i_b * strides.v.b + i_hk * strides.v.h

    if HAS_SINK:  # the sink as a first score with no value: maximum = sink, denominator = exp2(0)
        b_m = tl.zeros([BLOCK_M], dtype=tl.float32) + tl.load(SINK2 + i_h)
        b_l = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    else:
        b_m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        b_l = tl.zeros([BLOCK_M], dtype=tl.float32)
    b_acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    if GATED:
        G += i_bh * stride_lse
    b_gq = gate_values(G, o_m, seq_q, GATED)  # [BM]
    if WINDOW_LEFT >= 0 or WINDOW_RIGHT >= 0:  # only the key blocks inside the band; both edges masked
        n_lo, n_full_lo, n_full_hi, n_hi = band_blocks(start_m, seq_k, seq_k - seq_q, BLOCK_M, BLOCK_N,
                                                       WINDOW_LEFT, WINDOW_RIGHT)
        for start_n in range(n_lo, n_full_lo, BLOCK_N):
            b_acc, b_m, b_l = _fwd_step((b_acc, b_m, b_l), (o_m, b_q, b_gq), (K, V, G), strides, start_n, seq_q,
                                        seq_k, qk_scale, HEAD_DIM, BLOCK_N, BLOCK_D,
                                        False, DOT_PRECISION, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, GATED,
                                        HEAD_DIM_V, BLOCK_DV)
        for start_n in range(n_full_lo, n_full_hi, BLOCK_N):
            b_acc, b_m, b_l = _fwd_step((b_acc, b_m, b_l), (o_m, b_q, b_gq), (K, V, G), strides, start_n, seq_q,
                                        seq_k, qk_scale, HEAD_DIM, BLOCK_N, BLOCK_D,
                                        False, DOT_PRECISION, -1, -1, SOFTCAP, GATED, HEAD_DIM_V, BLOCK_DV)
        for start_n in range(n_full_hi, n_hi, BLOCK_N):
            b_acc, b_m, b_l = _fwd_step((b_acc, b_m, b_l), (o_m, b_q, b_gq), (K, V, G), strides, start_n, seq_q,
                                        seq_k, qk_scale, HEAD_DIM, BLOCK_N, BLOCK_D,
                                        False, DOT_PRECISION, WINDOW_LEFT, WINDOW_RIGHT, SOFTCAP, GATED,
                                        HEAD_DIM_V, BLOCK_DV)
    elif CAUSAL:
        shift = seq_k - seq_q  # bottom-right alignment: query i sees keys j <= i + shift
        n_end = tl.minimum(tl.maximum(start_m + BLOCK_M + shift, 0), seq_k)
        n_mid = tl.minimum(tl.maximum(start_m + shift + 1, 0) // BLOCK_N * BLOCK_N, n_end)
        for start_n in range(0, n_mid, BLOCK_N):  # every query of the block sees every key
            b_acc, b_m, b_l = _fwd_step((b_acc, b_m, b_l), (o_m, b_q, b_gq), (K, V, G), strides, start_n, seq_q,
                                        seq_k, qk_scale, HEAD_DIM, BLOCK_N, BLOCK_D,
                                        False, DOT_PRECISION, -1, -1, SOFTCAP, GATED, HEAD_DIM_V, BLOCK_DV)
        for start_n in range(n_mid, n_end, BLOCK_N):  # the diagonal: causal mask
            b_acc, b_m, b_l = _fwd_step((b_acc, b_m, b_l), (o_m, b_q, b_gq), (K, V, G), strides, start_n, seq_q,
                                        seq_k, qk_scale, HEAD_DIM, BLOCK_N, BLOCK_D,
                                        True, DOT_PRECISION, -1, -1, SOFTCAP, GATED, HEAD_DIM_V, BLOCK_DV)
    else:
        for start_n in range(0, seq_k, BLOCK_N):
            b_acc, b_m, b_l = _fwd_step((b_acc, b_m, b_l), (o_m, b_q, b_gq), (K, V, G), strides, start_n, seq_q,
                                        seq_k, qk_scale, HEAD_DIM, BLOCK_N, BLOCK_D,
                                        False, DOT_PRECISION, -1, -1, SOFTCAP, GATED, HEAD_DIM_V, BLOCK_DV)

    b_empty = b_l == 0.  # rows that saw no key
    b_l_safe = tl.where(b_empty, 1., b_l)
    b_o = b_acc / b_l_safe[:, None]
    b_lse = tl.where(b_empty, float("inf"), b_m + tl.math.log2(b_l_safe))
    tl.store(O + i_b * strides.o.b + i_h * strides.o.h + o_m[:, None] * strides.o.n + o_dv[None, :] * strides.o.d,
             b_o.to(O.dtype.element_ty), mask=m_mdv)  # [BM, BDV]
    tl.store(LSE + i_bh * stride_lse + o_m, b_lse, mask=o_m < seq_q)


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs get exact fp32 dots (tests); fp16/bf16 use the tensor cores as they are."""
    return "ieee" if dtype == torch.float32 else "tf32"


def attention_forward(q, k, v, causal: bool, scale: float, *, BLOCK_M: int = 64, BLOCK_N: int = 64,
                      num_warps: int = 4, num_stages: int = 2, varlen=None, mods=None, gate=None, sink=None):
    """q [B, Nq, H, D], k [B, Nk, Hkv, D], v [B, Nk, Hkv, Dv] (any strides) -> o [B, Nq, H, Dv] (q's dtype),
    lse [B, H, Nq] fp32 (base 2). sink: fp32 [H] logits or None (module doc).
    varlen: a kernels.varlen.Packing; then B = 1 and N is the packed length (causal per document).
    mods: the window / softcap (variants.problem.Modifiers) or None; gate: G = cumsum(g) [B, H, Nq] fp32 or None."""
    slot = memo("attention_forward") if varlen is None else None  # a plan's phase: its key fixes all but the data
    if slot:
        o = torch.empty(slot["o_shape"], device=q.device, dtype=q.dtype) if slot["o_shape"] is not None \
            else torch.empty_like(q)
        lse = torch.empty(slot["lse_shape"], device=q.device, dtype=torch.float32)
        if slot["grid"] is not None:
            launch(_fwd_kernel, slot["grid"], tensors=ForwardTensors(q, k, v, o, lse),
                   sizes=ForwardSizes(*slot["sizes"], scale * LOG2E), G=gate, SINK2=sink_logits2(sink),
                   **slot["fixed"])
        return o, lse
    batch, seq_q, heads, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    head_dim_v = v.shape[-1]
    o = torch.empty((batch, seq_q, heads, head_dim_v), device=q.device, dtype=q.dtype) if head_dim_v != head_dim \
        else torch.empty_like(q)
    lse = torch.empty((batch, heads, seq_q), device=q.device, dtype=torch.float32)
    doc_args, blocks = (UNIFORM_ARGS, cdiv(seq_q, BLOCK_M)) if varlen is None else varlen.kernel_args(block_q=BLOCK_M)
    grid = (blocks, batch * heads) if blocks else None
    fixed = dict(strides=ForwardStrides(strides(q), strides(k), strides(v), strides(o)), **doc_args,
                 HAS_SINK=sink is not None, HEAD_DIM_V=head_dim_v, BLOCK_DV=head_block(head_dim_v),
                 HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=head_block(head_dim),
                 CAUSAL=causal, DOT_PRECISION=dot_precision(q.dtype), **modifier_args(mods, gate is not None, causal),
                 num_warps=num_warps, num_stages=num_stages)
    if slot is not None:
        slot.update(o_shape=(batch, seq_q, heads, head_dim_v) if head_dim_v != head_dim else None,
                    lse_shape=(batch, heads, seq_q), grid=grid, fixed=fixed, sizes=(seq_q, seq_k, heads,
                                                                                  heads // kv_heads))
    if grid is None:
        return o, lse
    launch(_fwd_kernel, grid, tensors=ForwardTensors(q, k, v, o, lse),
           sizes=ForwardSizes(seq_q, seq_k, heads, heads // kv_heads, scale * LOG2E), G=gate, SINK2=sink_logits2(sink),
           **fixed)
    return o, lse
