"""two_pass (FLA style): a dK/dV kernel (K/V block resident, loop over Q/dO) and a dQ kernel
(Q block resident, loop over K/V). No atomics; S and P are recomputed in both (~12 N^2 d FLOPs)."""
import torch
import triton
import triton.language as tl

from kernels.backward_args import backward_args
from kernels.backward_steps import dkdv_program, document_pointers, dq_program
from kernels.common import document_block, even_blocks, head_dim_args, modifier_args
from kernels.forward import dot_precision
from kernels.gate import check_prescale
from kernels.varlen import UNIFORM_ARGS


@triton.jit
def _dkdv_kernel(Q, K, V, DO, DQ, DK, DV, LSE, DELTA,
                 stride_qb, stride_qn, stride_qh, stride_qd, stride_kb, stride_kn, stride_kh, stride_kd,
                 stride_vb, stride_vn, stride_vh, stride_vd, stride_dob, stride_don, stride_doh, stride_dod,
                 stride_dqb, stride_dqn, stride_dqh, stride_dqd, stride_dkb, stride_dkn, stride_dkh, stride_dkd,
                 stride_dvb, stride_dvn, stride_dvh, stride_dvd,
                 seq_q, seq_k, heads, kv_heads, qk_scale, sm_scale, CU_SEQLENS_Q, CU_SEQLENS_K, BLOCK_INDICES, G, DG,
                 DG_QUERY, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                 CAUSAL: tl.constexpr, ACCUM_DQ: tl.constexpr, LONGEST_FIRST: tl.constexpr, PRESCALED: tl.constexpr,
                 IS_VARLEN: tl.constexpr, GRADS: tl.constexpr, BLOCK_D2: tl.constexpr,
                 EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, EVEN_D2: tl.constexpr,
                 DOT_PRECISION: tl.constexpr, WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr,
                 SOFTCAP: tl.constexpr, GATED: tl.constexpr):
    """Grid (cdiv(Nk, BLOCK_N), B * Hkv), or (B * Hkv, cdiv(Nk, BLOCK_N)) with LONGEST_FIRST: programs are
    dispatched x-fastest, so every head's key block 0 (the most queries when causal) starts first and the
    last wave holds the shortest programs. With ACCUM_DQ (the atomic design) it also adds dS K into fp32 DQ.
    IS_VARLEN: B = 1 and the blocks axis runs over the (document, key block) pairs of BLOCK_INDICES (with
    LONGEST_FIRST sorted heaviest first across documents). GRADS: 3 = dK and dV; 1 / 2 = dV / dK only (split).
    BLOCK_D2 > 0: the head dim as two register blocks, BLOCK_D then BLOCK_D2 (kernels.common.head_chunks).
    Score modifiers (kernels/backward_steps.py): G the gate's cumsum, DG its per-key sums of dS, both like LSE; with
    ACCUM_DQ, DG_QUERY (zeroed, like LSE) gets the per-query sums by atomics."""
    if LONGEST_FIRST:
        i_n = tl.program_id(1)
        i_bhk = tl.program_id(0)
    else:
        i_n = tl.program_id(0)
        i_bhk = tl.program_id(1)
    stride_lse = seq_q  # LSE, DELTA [B, H, Nq] (varlen: [1, H, total_q])
    if IS_VARLEN:
        i_n, bos_q, seq_q, bos_k, seq_k = document_block(BLOCK_INDICES, CU_SEQLENS_Q, CU_SEQLENS_K, i_n)
        Q, K, V, DO, DQ, DK, DV, LSE, DELTA = document_pointers(
            Q, K, V, DO, DQ, DK, DV, LSE, DELTA,
            stride_qn, stride_kn, stride_vn, stride_don, stride_dqn, stride_dkn, stride_dvn, bos_q, bos_k)
        if GATED:  # like LSE (a gated batch has bos_k == bos_q)
            G += bos_q
            DG += bos_q
            if ACCUM_DQ:
                DG_QUERY += bos_q
    dkdv_program(Q, K, V, DO, DK, DV, LSE, DELTA, DQ,
                 stride_qb, stride_qn, stride_qh, stride_qd, stride_kb, stride_kn, stride_kh, stride_kd,
                 stride_vb, stride_vn, stride_vh, stride_vd, stride_dob, stride_don, stride_doh, stride_dod,
                 stride_dkb, stride_dkn, stride_dkh, stride_dkd, stride_dvb, stride_dvn, stride_dvh, stride_dvd,
                 stride_dqb, stride_dqn, stride_dqh, stride_dqd,
                 seq_q, seq_k, stride_lse, heads, heads // kv_heads, qk_scale, sm_scale,
                 i_n, i_bhk // kv_heads, i_bhk % kv_heads,
                 HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, 1, CAUSAL, PRESCALED, ACCUM_DQ, EVEN_M, EVEN_N, EVEN_D, DOT_PRECISION,
                 GRADS, BLOCK_D2, EVEN_D2, G=G, DG=DG, WINDOW_LEFT=WINDOW_LEFT, WINDOW_RIGHT=WINDOW_RIGHT,
                 SOFTCAP=SOFTCAP, GATED=GATED, DG_QUERY=DG_QUERY)


@triton.jit
def _dq_kernel(Q, K, V, DO, DQ, DK, DV, LSE, DELTA,
               stride_qb, stride_qn, stride_qh, stride_qd, stride_kb, stride_kn, stride_kh, stride_kd,
               stride_vb, stride_vn, stride_vh, stride_vd, stride_dob, stride_don, stride_doh, stride_dod,
               stride_dqb, stride_dqn, stride_dqh, stride_dqd, stride_dkb, stride_dkn, stride_dkh, stride_dkd,
               stride_dvb, stride_dvn, stride_dvh, stride_dvd,
               seq_q, seq_k, heads, kv_heads, qk_scale, sm_scale, CU_SEQLENS_Q, CU_SEQLENS_K, BLOCK_INDICES, G, DG,
               HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
               CAUSAL: tl.constexpr, LONGEST_FIRST: tl.constexpr, PRESCALED: tl.constexpr, IS_VARLEN: tl.constexpr,
               BLOCK_D2: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr,
               EVEN_D2: tl.constexpr, DOT_PRECISION: tl.constexpr, WINDOW_LEFT: tl.constexpr,
               WINDOW_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, GATED: tl.constexpr):
    """Grid (cdiv(Nq, BLOCK_M), B * H), or (B * H, cdiv(Nq, BLOCK_M)) with LONGEST_FIRST: every head's last
    query block (the most keys when causal) is dispatched first. IS_VARLEN: B = 1 and the blocks axis runs
    over the (document, query block) pairs of BLOCK_INDICES (with LONGEST_FIRST already heaviest first).
    Score modifiers (kernels/backward_steps.py): G the gate's cumsum, DG its per-query sums of dS, both like LSE."""
    if LONGEST_FIRST:
        i_m = tl.program_id(1) if IS_VARLEN else tl.num_programs(1) - 1 - tl.program_id(1)
        i_bh = tl.program_id(0)
    else:
        i_m = tl.program_id(0)
        i_bh = tl.program_id(1)
    stride_lse = seq_q  # LSE, DELTA [B, H, Nq] (varlen: [1, H, total_q])
    if IS_VARLEN:
        i_m, bos_q, seq_q, bos_k, seq_k = document_block(BLOCK_INDICES, CU_SEQLENS_Q, CU_SEQLENS_K, i_m)
        Q, K, V, DO, DQ, DK, DV, LSE, DELTA = document_pointers(
            Q, K, V, DO, DQ, DK, DV, LSE, DELTA,
            stride_qn, stride_kn, stride_vn, stride_don, stride_dqn, stride_dkn, stride_dvn, bos_q, bos_k)
        if GATED:
            G += bos_q
            DG += bos_q
    dq_program(Q, K, V, DO, DQ, LSE, DELTA,
               stride_qb, stride_qn, stride_qh, stride_qd, stride_kb, stride_kn, stride_kh, stride_kd,
               stride_vb, stride_vn, stride_vh, stride_vd, stride_dob, stride_don, stride_doh, stride_dod,
               stride_dqb, stride_dqn, stride_dqh, stride_dqd,
               seq_q, seq_k, stride_lse, heads, heads // kv_heads, qk_scale, sm_scale, i_m, i_bh // heads, i_bh % heads,
               HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, 1, CAUSAL, PRESCALED, EVEN_M, EVEN_N, EVEN_D, DOT_PRECISION,
               BLOCK_D2, EVEN_D2, G=G, DG=DG, WINDOW_LEFT=WINDOW_LEFT, WINDOW_RIGHT=WINDOW_RIGHT, SOFTCAP=SOFTCAP,
               GATED=GATED)


def launch_dkdv(q, k, v, do, dq, dk, dv, lse, delta, *, causal: bool, scale: float, accumulate_dq: bool,
                BLOCK_M: int, BLOCK_N: int, num_warps: int, num_stages: int, longest_first: bool = False,
                prescale: bool = False, split: bool = False, split_d: bool = False, varlen=None, mods=None,
                gate=None) -> None:
    """Writes dk, dv [B, Nk, Hkv, D]; with accumulate_dq also adds unscaled dS K into fp32 dq.
    prescale: the resident K block is multiplied by scale * log2(e) once instead of every score tile.
    split: two launches, dV then dK, each with one [BLOCK_N, D] fp32 accumulator instead of two (S and P are
    computed in both: 5 matmuls instead of 4); for large head dims, where two accumulators spill.
    split_d: a head dim that is not a power of two in two register blocks (kernels.common.head_chunks).
    varlen: a kernels.varlen.Packing; then B = 1 and N is the packed length.
    mods: window / softcap (variants.problem.Modifiers) or None; gate: a kernels.gate.GateSums (writes its as_key,
    and with accumulate_dq its as_query, from the same dS)."""
    if prescale and accumulate_dq:
        raise ValueError("prescale cannot be combined with accumulate_dq (dQ would use the scaled K)")
    check_prescale(gate, prescale)
    if split and accumulate_dq:
        raise ValueError("split cannot be combined with accumulate_dq (one pass must see dS and dV)")
    batch, seq_q, _, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    head_args = head_dim_args(head_dim, split_d)
    if head_args["BLOCK_D2"] and accumulate_dq:
        raise ValueError("split_d cannot be combined with accumulate_dq (the dQ atomics take one head-dim block)")
    even_m, even_n, _ = even_blocks(seq_q, seq_k, head_dim, head_args["BLOCK_D"], walked=BLOCK_M,
                                         resident=BLOCK_N, walks_queries=True, causal=causal, varlen=varlen is not None)
    longest_first = longest_first and (causal or varlen is not None)  # else every program has the same work
    doc_args, blocks = (UNIFORM_ARGS, triton.cdiv(seq_k, BLOCK_N)) if varlen is None else \
        varlen.kernel_args(block_k=BLOCK_N, heaviest_first=longest_first, causal=causal)
    grid = (blocks, batch * kv_heads)
    if blocks == 0:
        return
    args = backward_args(q, k, v, do, dq, dk, dv, lse, delta, scale)
    for grads in ((1, 2) if split else (3,)):  # GRADS: 1 dV only, 2 dK only, 3 both (kernels/backward_steps.py)
        _dkdv_kernel[grid[::-1] if longest_first else grid](
                           *args, **doc_args, **gate_pointers(gate, "as_key"),
                           DG_QUERY=gate.query_for_atomics() if gate is not None and accumulate_dq else None,
                           **modifier_args(mods, gate is not None, causal),
                           **head_args, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                           CAUSAL=causal, ACCUM_DQ=accumulate_dq, LONGEST_FIRST=longest_first, PRESCALED=prescale,
                           GRADS=grads, EVEN_M=even_m, EVEN_N=even_n,
                           DOT_PRECISION=dot_precision(q.dtype),
                           num_warps=num_warps, num_stages=num_stages)


def launch_dq(q, k, v, do, dq, lse, delta, *, causal: bool, scale: float,
              BLOCK_M: int, BLOCK_N: int, num_warps: int, num_stages: int, longest_first: bool = False,
              prescale: bool = False, split_d: bool = False, varlen=None, mods=None, gate=None) -> None:
    """Writes dq [B, Nq, H, D]. prescale: the resident Q block is multiplied by scale * log2(e) once.
    mods, gate: as launch_dkdv (writes the gate's as_query).
    split_d: a head dim that is not a power of two in two register blocks (kernels.common.head_chunks).
    varlen: a kernels.varlen.Packing; then B = 1 and N is the packed length."""
    batch, seq_q, heads, head_dim = q.shape
    head_args = head_dim_args(head_dim, split_d)
    even_m, even_n, _ = even_blocks(seq_q, k.shape[1], head_dim, head_args["BLOCK_D"], walked=BLOCK_N,
                                         resident=BLOCK_M, walks_queries=False, causal=causal,
                                         varlen=varlen is not None)
    longest_first = longest_first and (causal or varlen is not None)
    doc_args, blocks = (UNIFORM_ARGS, triton.cdiv(seq_q, BLOCK_M)) if varlen is None else \
        varlen.kernel_args(block_q=BLOCK_M, heaviest_first=longest_first, causal=causal)
    grid = (blocks, batch * heads)
    if blocks == 0:
        return
    _dq_kernel[grid[::-1] if longest_first else grid](
                     *backward_args(q, k, v, do, dq, dq, dq, lse, delta, scale), **doc_args,
                     **gate_pointers(gate, "as_query"), **modifier_args(mods, gate is not None, causal),
                     **head_args, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                     CAUSAL=causal, LONGEST_FIRST=longest_first, PRESCALED=prescale, EVEN_M=even_m, EVEN_N=even_n,
                     DOT_PRECISION=dot_precision(q.dtype),
                     num_warps=num_warps, num_stages=num_stages)


def two_pass_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float,
                      BLOCK_M1: int, BLOCK_N1: int, num_warps1: int, num_stages1: int,
                      BLOCK_M2: int, BLOCK_N2: int, num_warps2: int, num_stages2: int, longest_first: bool,
                      prescale: bool, split_dkdv: bool = False, split_d: bool = False, varlen=None, mods=None,
                      gate=None):
    """-> dq like q, dk/dv like k/v. Suffix 1: the dK/dV kernel; suffix 2: the dQ kernel.
    split_dkdv: the dK/dV kernel runs as a dV pass and a dK pass (launch_dkdv's split).
    split_d: both kernels hold a non-power-of-two head dim as two register blocks (192 = 128 + 64).
    varlen: a kernels.varlen.Packing (q [1, total_q, H, D], k/v [1, total_k, Hkv, D]).
    mods: window / softcap (variants.problem.Modifiers) or None; gate: a kernels.gate.GateSums or None."""
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    launch_dkdv(q, k, v, do, dq, dk, dv, lse, delta, causal=causal, scale=scale, accumulate_dq=False,
                BLOCK_M=BLOCK_M1, BLOCK_N=BLOCK_N1, num_warps=num_warps1, num_stages=num_stages1,
                longest_first=longest_first, prescale=prescale, split=split_dkdv, split_d=split_d, varlen=varlen,
                mods=mods, gate=gate)
    launch_dq(q, k, v, do, dq, lse, delta, causal=causal, scale=scale,
              BLOCK_M=BLOCK_M2, BLOCK_N=BLOCK_N2, num_warps=num_warps2, num_stages=num_stages2,
              longest_first=longest_first, prescale=prescale, split_d=split_d, varlen=varlen, mods=mods, gate=gate)
    return dq, dk, dv


def gate_pointers(gate, written: str) -> dict:
    """G and DG of a backward kernel: the gate's cumsum and the sums it writes (GateSums.as_query / as_key)."""
    if gate is None:
        return dict(G=None, DG=None)
    return dict(G=gate.cumsum, DG=getattr(gate, written))
