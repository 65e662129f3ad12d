"""The dK/dV kernel (K/V block resident, loop over Q/dO) and the dQ kernel (Q block resident, loop over K/V), and
their launchers: two_pass runs both; atomic runs the first with dQ atomics (the second in deterministic mode);
atomic_tma's deterministic mode runs the second."""
import triton
import triton.language as tl

from kernels.backward_args import NO_GATE, GateTensors, backward_args, step_config
from kernels.backward_steps import document_pointers
from kernels.dkdv_steps import dkdv_program
from kernels.dq_steps import dq_program
from kernels.common import block_and_head, cdiv, document_block, even_blocks, head_dim_args, modifier_args
from kernels.forward import dot_precision
from kernels.gate import check_prescale
from kernels.varlen import UNIFORM_ARGS
from kernels.launch import launch


@triton.jit
def _dkdv_kernel(tensors, strides, sizes, docs, gate,
                 CFG: tl.constexpr, LONGEST_FIRST: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Grid (cdiv(Nk, BLOCK_N), B * Hkv), or (B * Hkv, cdiv(Nk, BLOCK_N)) with LONGEST_FIRST: programs are
    dispatched x-fastest, so every head's key block 0 (the most queries when causal) starts first and the
    last wave holds the shortest programs. tensors, strides, sizes, docs, gate: kernels.backward_args.
    CFG: kernels.backward_args.StepConfig. With CFG.ACCUM_DQ (the atomic design) it also adds dS K into the fp32 dq.
    IS_VARLEN: B = 1 and the blocks axis runs over the (document, key block) pairs of docs.block_indices (with
    LONGEST_FIRST sorted heaviest first across documents). CFG.GRADS: 3 = dK and dV; 1 / 2 = dV / dK only (split).
    CFG.BLOCK_D2 > 0: the head dim as two register blocks, BLOCK_D then BLOCK_D2 (kernels.common.head_chunks).
    Score modifiers (kernels/backward_steps.py): gate.g the gate's cumsum, gate.dg its per-key sums of dS; with
    ACCUM_DQ, gate.dg_query (zeroed) gets the per-query sums by atomics."""
    seq_q, seq_k, heads, kv_heads, qk_scale, sm_scale = sizes
    i_n, i_bhk = block_and_head(LONGEST_FIRST)
    stride_lse = seq_q  # LSE, DELTA [B, H, Nq] (varlen: [1, H, total_q])
    if IS_VARLEN:
        i_n, bos_q, seq_q, bos_k, seq_k = document_block(docs, i_n)
        tensors = document_pointers(tensors, strides, strides.dq.n, bos_q, bos_k)
        if CFG.GATED:  # like LSE (a gated batch has bos_k == bos_q)
            G, DG, DG_QUERY = gate
            if CFG.ACCUM_DQ:
                gate = GateTensors(G + bos_q, DG + bos_q, DG_QUERY + bos_q)
            else:
                gate = GateTensors(G + bos_q, DG + bos_q, DG_QUERY)
    dkdv_program(tensors, strides, gate, seq_q, seq_k, stride_lse, heads, heads // kv_heads, qk_scale, sm_scale,
                 i_n, i_bhk // kv_heads, i_bhk % kv_heads, CFG)


@triton.jit
def _dq_kernel(tensors, strides, sizes, docs, gate,
               CFG: tl.constexpr, LONGEST_FIRST: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Grid (cdiv(Nq, BLOCK_M), B * H), or (B * H, cdiv(Nq, BLOCK_M)) with LONGEST_FIRST: every head's last
    query block (the most keys when causal) is dispatched first. tensors, strides, sizes, docs, gate:
    kernels.backward_args (tensors.dk, dv unused); CFG: kernels.backward_args.StepConfig. IS_VARLEN: B = 1 and the
    blocks axis runs over the (document, query block) pairs of docs.block_indices (with LONGEST_FIRST already
    heaviest first). Score modifiers (kernels/backward_steps.py): gate.g the gate's cumsum, gate.dg its per-query
    sums of dS."""
    seq_q, seq_k, heads, kv_heads, qk_scale, sm_scale = sizes
    i_m, i_bh = block_and_head(LONGEST_FIRST, REVERSED=not IS_VARLEN)  # packed: the table is heaviest first
    stride_lse = seq_q  # LSE, DELTA [B, H, Nq] (varlen: [1, H, total_q])
    if IS_VARLEN:
        i_m, bos_q, seq_q, bos_k, seq_k = document_block(docs, i_m)
        tensors = document_pointers(tensors, strides, strides.dq.n, bos_q, bos_k)
        if CFG.GATED:
            G, DG, DG_QUERY = gate
            gate = GateTensors(G + bos_q, DG + bos_q, DG_QUERY)
    dq_program(tensors, strides, gate, seq_q, seq_k, stride_lse, heads, heads // kv_heads, qk_scale, sm_scale,
               i_m, i_bh // heads, i_bh % heads, CFG)


def launch_dkdv(q, k, v, do, dq, dk, dv, lse, delta, *, causal: bool, scale: float, accumulate_dq: bool,
                BLOCK_M: int, BLOCK_N: int, num_warps: int, num_stages: int, longest_first: bool = False,
                prescale: bool = False, split: bool = False, split_d: bool = False, varlen=None, mods=None,
                gate=None) -> None:
    """Writes dk [B, Nk, Hkv, D], dv [B, Nk, Hkv, Dv] (Dv: v's head dim); with accumulate_dq also adds unscaled
    dS K into fp32 dq.
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
    head_args = head_dim_args(head_dim, split_d, v.shape[-1])
    if head_args["BLOCK_D2"] and accumulate_dq:
        raise ValueError("split_d cannot be combined with accumulate_dq (the dQ atomics take one head-dim block)")
    even_m, even_n, _ = even_blocks(seq_q, seq_k, head_dim, head_args["BLOCK_D"], walked=BLOCK_M,
                                         resident=BLOCK_N, walks_queries=True, causal=causal, varlen=varlen is not None)
    longest_first = longest_first and (causal or varlen is not None)  # else every program has the same work
    doc_args, blocks = (UNIFORM_ARGS, cdiv(seq_k, BLOCK_N)) if varlen is None else \
        varlen.kernel_args(block_k=BLOCK_N, heaviest_first=longest_first, causal=causal)
    grid = (blocks, batch * kv_heads)
    if blocks == 0:
        return
    args = backward_args(q, k, v, do, dq, dk, dv, lse, delta, scale)
    gate_args = gate_tensors(gate, "as_key", gate.query_for_atomics() if gate is not None and accumulate_dq else None)
    for grads in ((1, 2) if split else (3,)):  # GRADS: 1 dV only, 2 dK only, 3 both (kernels/backward_steps.py)
        cfg = step_config(head_args, modifier_args(mods, gate is not None, causal), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                          EVEN_M=even_m, EVEN_N=even_n, CAUSAL=causal, PRESCALED=prescale,
                          DOT_PRECISION=dot_precision(q.dtype), ACCUM_DQ=accumulate_dq, GRADS=grads)
        launch(_dkdv_kernel, grid[::-1] if longest_first else grid, **args, **doc_args, gate=gate_args, CFG=cfg,
               LONGEST_FIRST=longest_first, num_warps=num_warps, num_stages=num_stages)


def launch_dq(q, k, v, do, dq, lse, delta, *, causal: bool, scale: float,
              BLOCK_M: int, BLOCK_N: int, num_warps: int, num_stages: int, longest_first: bool = False,
              prescale: bool = False, split_d: bool = False, varlen=None, mods=None, gate=None) -> None:
    """Writes dq [B, Nq, H, D]. prescale: the resident Q block is multiplied by scale * log2(e) once.
    mods, gate: as launch_dkdv (writes the gate's as_query).
    split_d: a head dim that is not a power of two in two register blocks (kernels.common.head_chunks).
    varlen: a kernels.varlen.Packing; then B = 1 and N is the packed length."""
    batch, seq_q, heads, head_dim = q.shape
    head_args = head_dim_args(head_dim, split_d, v.shape[-1])
    even_m, even_n, _ = even_blocks(seq_q, k.shape[1], head_dim, head_args["BLOCK_D"], walked=BLOCK_N,
                                         resident=BLOCK_M, walks_queries=False, causal=causal,
                                         varlen=varlen is not None)
    longest_first = longest_first and (causal or varlen is not None)
    doc_args, blocks = (UNIFORM_ARGS, cdiv(seq_q, BLOCK_M)) if varlen is None else \
        varlen.kernel_args(block_q=BLOCK_M, heaviest_first=longest_first, causal=causal)
    grid = (blocks, batch * heads)
    if blocks == 0:
        return
    cfg = step_config(head_args, modifier_args(mods, gate is not None, causal), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                      EVEN_M=even_m, EVEN_N=even_n, CAUSAL=causal, PRESCALED=prescale,
                      DOT_PRECISION=dot_precision(q.dtype))
    launch(_dq_kernel, grid[::-1] if longest_first else grid, **backward_args(q, k, v, do, dq, dq, dq, lse, delta, scale),
           **doc_args, gate=gate_tensors(gate, "as_query"), CFG=cfg, LONGEST_FIRST=longest_first,
           num_warps=num_warps, num_stages=num_stages)


def gate_tensors(gate, written: str, query_sums=None) -> GateTensors:
    """The gate argument of the dK/dV and dQ kernels: the gate's cumsum, the sums the kernel writes
    (kernels.gate.GateSums.as_key / as_query) and, for the dK/dV kernel with dQ atomics, the per-query sums."""
    if gate is None:
        return NO_GATE
    return GateTensors(gate.cumsum, getattr(gate, written), query_sums)
