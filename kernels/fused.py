"""fused (Triton-tutorial style): program i computes dK/dV of key block i and dQ of query block i,
walking the causal diagonal in slices of BLOCK / BLK_SLICE_FACTOR, with the resident K (and Q)
pre-scaled by scale * log2(e). Unlike the tutorial it handles non-causal attention, Nq != Nk and
lengths that are not multiples of the block.
Score modifiers (issue 24) come from the shared steps (kernels/backward_steps.py): a sliding window (both halves
walk only the blocks inside the band), softcap and the forget gate (the dK/dV half writes the per-key sums of dS,
the dQ half the per-query ones)."""
import torch
import triton
import triton.language as tl

from kernels.backward_args import NO_GATE, GateTensors, backward_args, step_config
from kernels.backward_steps import document_pointers
from kernels.dkdv_steps import dkdv_program
from kernels.dq_steps import dq_program
from kernels.common import cdiv, document_block, even_blocks, head_dim_args, modifier_args
from kernels.forward import dot_precision
from kernels.gate import check_prescale
from kernels.varlen import UNIFORM_ARGS
from kernels.launch import launch


@triton.jit
def _fused_kernel(tensors, strides, sizes, docs, gate,
                  DKDV: tl.constexpr, DQ: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Grid (max(cdiv(Nk, DKDV.BLOCK_N), cdiv(Nq, DQ.BLOCK_M)), B * Hkv). tensors, strides, sizes, docs, gate:
    kernels.backward_args; DKDV, DQ: the two halves' kernels.backward_args.StepConfig (their SLICE the
    BLK_SLICE_FACTOR). IS_VARLEN: B = 1 and the first axis runs over the (document, block) pairs of
    docs.block_indices (per document, the max of its two block counts).
    Score modifiers (module doc): gate.g the gate's cumsum, gate.dg / gate.dg_query its per-key / per-query sums
    of dS, all [B, H, Nq] fp32 like LSE (None unless GATED)."""
    seq_q, seq_k, heads, kv_heads, qk_scale, sm_scale = sizes
    i_p = tl.program_id(0)
    i_bhk = tl.program_id(1)
    i_b = i_bhk // kv_heads
    i_hk = i_bhk % kv_heads
    group = heads // kv_heads
    stride_lse = seq_q  # LSE, DELTA [B, H, Nq] (varlen: [1, H, total_q])
    if IS_VARLEN:
        i_p, bos_q, seq_q, bos_k, seq_k = document_block(docs, i_p)
        tensors = document_pointers(tensors, strides, strides.dq.n, bos_q, bos_k)
        if DKDV.GATED:  # like LSE (a gated batch has bos_k == bos_q)
            G, DG_KEY, DG_QUERY = gate
            gate = GateTensors(G + bos_q, DG_KEY + bos_q, DG_QUERY + bos_q)
    G, DG_KEY, DG_QUERY = gate
    if i_p * DKDV.BLOCK_N < seq_k:
        dkdv_program(tensors, strides, GateTensors(G, DG_KEY, None), seq_q, seq_k, stride_lse, heads, group,
                     qk_scale, sm_scale, i_p, i_b, i_hk, DKDV)
    if i_p * DQ.BLOCK_M < seq_q:
        for i_g in range(group):
            dq_program(tensors, strides, GateTensors(G, DG_QUERY, None), seq_q, seq_k, stride_lse, heads, group,
                       qk_scale, sm_scale, i_p, i_b, i_hk * group + i_g, DQ)


def fused_backward(q, k, v, do, lse, delta, *, causal: bool, scale: float, BLOCK_M1: int, BLOCK_N1: int,
                   BLOCK_M2: int, BLOCK_N2: int, BLK_SLICE_FACTOR: int, prescale: bool,
                   num_warps: int, num_stages: int, varlen=None, mods=None, gate=None):
    """-> dq like q, dk/dv like k/v. varlen: a kernels.varlen.Packing (q [1, total_q, H, D], k [1, total_k, Hkv, D],
    v [1, total_k, Hkv, Dv]).
    mods: window / softcap (variants.problem.Modifiers) or None; gate: a kernels.gate.GateSums (writes both its
    as_key and as_query) or None."""
    check_prescale(gate, prescale)
    batch, seq_q, _, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    head_args = head_dim_args(head_dim, False, v.shape[-1])  # one register block per head dim
    block_d = head_args["BLOCK_D"]
    even_m1, even_n1, _ = even_blocks(seq_q, seq_k, head_dim, block_d, walked=BLOCK_M1, resident=BLOCK_N1,
                                           walks_queries=True, causal=causal, varlen=varlen is not None)
    even_m2, even_n2, _ = even_blocks(seq_q, seq_k, head_dim, block_d, walked=BLOCK_N2, resident=BLOCK_M2,
                                      walks_queries=False, causal=causal, varlen=varlen is not None)
    if varlen is None:
        doc_args, blocks = UNIFORM_ARGS, max(cdiv(seq_k, BLOCK_N1), cdiv(seq_q, BLOCK_M2))
    else:
        doc_args, blocks = varlen.kernel_args(block_q=BLOCK_M2, block_k=BLOCK_N1)
    if blocks == 0:
        return dq, dk, dv
    grid = (blocks, batch * kv_heads)
    shared = dict(CAUSAL=causal, PRESCALED=prescale, DOT_PRECISION=dot_precision(q.dtype), SLICE=BLK_SLICE_FACTOR)
    mod_args = modifier_args(mods, gate is not None, causal)
    launch(_fused_kernel, grid, **backward_args(q, k, v, do, dq, dk, dv, lse, delta, scale), **doc_args,
           gate=gate_tensors(gate),
           DKDV=step_config(head_args, mod_args, BLOCK_M=BLOCK_M1, BLOCK_N=BLOCK_N1, EVEN_M=even_m1, EVEN_N=even_n1,
                            **shared),
           DQ=step_config(head_args, mod_args, BLOCK_M=BLOCK_M2, BLOCK_N=BLOCK_N2, EVEN_M=even_m2, EVEN_N=even_n2,
                          **shared),
           num_warps=num_warps, num_stages=num_stages)
    return dq, dk, dv


def gate_tensors(gate) -> GateTensors:
    """The fused kernel's gate argument: the gate's cumsum and the two sums it writes (kernels.gate.GateSums)."""
    return NO_GATE if gate is None else GateTensors(gate.cumsum, gate.as_key, gate.as_query)
