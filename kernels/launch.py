"""What the launchers of the stock Triton kernels share: the layout contract, the keyword arguments that describe
a problem to a kernel, and the launchers of the two passes several designs run (the dK/dV pass `_dkdv_kernel`:
two_pass, atomic; the dQ pass `_dq_kernel`: two_pass and the deterministic modes of atomic and atomic_tma).
Every kernel is launched by keyword.

Layout contract. The kernels read [B, N, H, D] views with unit head-dim stride and take one (batch, token, head)
stride set per tensor family: the query family q, o, do, dq (and an fp32 dQ accumulator allocated like q) shares
`stride_q`, the key family k, v, dk, dv shares `stride_k`. The supported layouts satisfy it as they are, with no
copy: "bnhd" (contiguous [B, N, H, D]), "bhnd" ([B, N, H, D] views of contiguous [B, H, N, D]) and a packed
varlen batch ([1, total, H, D]). `forward_layout` / `backward_layout` copy only a tensor that does not (a
non-unit head-dim stride, a view with gaps, or v / do laid out unlike k / q); outputs are then allocated with
torch.empty_like, which keeps a dense tensor's strides, so they join their family.
"""
import torch
import triton

from kernels.backward_steps import GRAD_DK, GRAD_DQ, GRAD_DV, _dkdv_kernel, _dq_kernel
from kernels.common import LOG2E, even_blocks, head_chunks
from kernels.varlen import UNIFORM_ARGS


def strides(t: torch.Tensor) -> tuple[int, int, int]:
    """(batch, token, head) strides, in elements, of a [B, N, H, D] view with unit head-dim stride."""
    return t.stride(0), t.stride(1), t.stride(2)


def is_dense(t: torch.Tensor) -> bool:
    """Unit head-dim stride and no gaps between elements (in any order of the other dims): a tensor whose
    strides torch.empty_like keeps. Dims of size 1 have no stride that matters."""
    if t.numel() == 0:
        return True
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        return False
    expected = 1
    for stride, size in sorted((t.stride(d), t.shape[d]) for d in range(t.dim()) if t.shape[d] > 1):
        if stride != expected:
            return False
        expected *= size
    return True


def same_strides(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one shape lay their elements out alike (dims of size 1 ignored)."""
    return all(a.stride(d) == b.stride(d) for d in range(a.dim()) if a.shape[d] > 1)


def dense(t: torch.Tensor) -> torch.Tensor:
    """t, or a contiguous copy of it when it is not dense (is_dense)."""
    return t if is_dense(t) else t.contiguous()


def _like(t: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """t, or a copy of it in ref's strides (ref dense)."""
    return t if same_strides(t, ref) else torch.empty_like(ref, dtype=t.dtype).copy_(t)


def forward_layout(q, k, v):
    """(q, k, v) in the layout contract: q and k dense, v in k's strides. Copies only a tensor outside it."""
    q, k = dense(q), dense(k)
    return q, k, _like(v, k)


def backward_layout(q, k, v, do):
    """(q, k, v, do) in the layout contract: q and k dense, v in k's strides, do in q's. Copies only a tensor
    outside it (never one of the supported layouts)."""
    q, k, v = forward_layout(q, k, v)
    return q, k, v, _like(do, q)


def shape_args(q, k) -> dict:
    """The problem as every attention kernel takes it: the two families' stride sets, lengths and head counts
    (q [B, Nq, H, D], k [B, Nk, Hkv, D] in the layout contract)."""
    return dict(stride_q=strides(q), stride_k=strides(k), seq_q=q.shape[1], seq_k=k.shape[1],
                heads=q.shape[2], kv_heads=k.shape[2])


def scale_args(scale: float) -> dict:
    """The backward kernels' scales: qk_scale (scores in log2 units) and sm_scale (dQ, dK)."""
    return dict(qk_scale=scale * LOG2E, sm_scale=scale)


def launch_dkdv(q, k, v, do, dq, dk, dv, lse, delta, *, causal: bool, scale: float, accumulate_dq: bool,
                BLOCK_M: int, BLOCK_N: int, num_warps: int, num_stages: int, longest_first: bool = False,
                prescale: bool = False, split: bool = False, split_d: bool = False, varlen=None) -> None:
    """Writes dk, dv [B, Nk, Hkv, D]; with accumulate_dq also adds unscaled dS K into fp32 dq.
    Tensors in the layout contract (backward_layout; dq, dk, dv allocated like q, k, v).
    prescale: the resident K block is multiplied by scale * log2(e) once instead of every score tile.
    split: two launches, dV then dK, each with one [BLOCK_N, D] fp32 accumulator instead of two (S and P are
    computed in both: 5 matmuls instead of 4); for large head dims, where two accumulators spill.
    split_d: a head dim that is not a power of two in two register blocks (kernels.common.head_chunks).
    varlen: a kernels.varlen.Packing; then B = 1 and N is the packed length."""
    if prescale and accumulate_dq:
        raise ValueError("prescale cannot be combined with accumulate_dq (dQ would use the scaled K)")
    if split and accumulate_dq:
        raise ValueError("split cannot be combined with accumulate_dq (one pass must see dS and dV)")
    batch, seq_q, _, head_dim = q.shape
    seq_k, kv_heads = k.shape[1], k.shape[2]
    _, block_d2 = head_chunks(head_dim, split_d)
    if block_d2 and accumulate_dq:
        raise ValueError("split_d cannot be combined with accumulate_dq (the dQ atomics take one head-dim block)")
    even_m, even_n = even_blocks(seq_q, seq_k, walked=BLOCK_M, resident=BLOCK_N, walks_queries=True, causal=causal,
                                 varlen=varlen is not None)
    longest_first = longest_first and (causal or varlen is not None)  # else every program has the same work
    doc_args, blocks = (UNIFORM_ARGS, triton.cdiv(seq_k, BLOCK_N)) if varlen is None else \
        varlen.kernel_args(block_k=BLOCK_N, heaviest_first=longest_first, causal=causal)
    grid = (blocks, batch * kv_heads)
    if blocks == 0:
        return
    both = GRAD_DV | GRAD_DK | (GRAD_DQ if accumulate_dq else 0)
    for grads in ((GRAD_DV, GRAD_DK) if split else (both,)):  # constexprs (kernels/backward_steps.py)
        _dkdv_kernel[grid[::-1] if longest_first else grid](
            Q=q, K=k, V=v, DO=do, DQ=dq, DK=dk, DV=dv, LSE=lse, DELTA=delta,
            **shape_args(q, k), **scale_args(scale), **doc_args,
            HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D2=block_d2, CAUSAL=causal,
            LONGEST_FIRST=longest_first, PRESCALED=prescale, GRADS=grads.value, EVEN_M=even_m, EVEN_N=even_n,
            num_warps=num_warps, num_stages=num_stages)


def launch_dq(q, k, v, do, dq, lse, delta, *, causal: bool, scale: float,
              BLOCK_M: int, BLOCK_N: int, num_warps: int, num_stages: int, longest_first: bool = False,
              prescale: bool = False, split_d: bool = False, varlen=None) -> None:
    """Writes dq [B, Nq, H, D]; tensors in the layout contract (backward_layout; dq allocated like q).
    prescale: the resident Q block is multiplied by scale * log2(e) once.
    split_d: a head dim that is not a power of two in two register blocks (kernels.common.head_chunks).
    varlen: a kernels.varlen.Packing; then B = 1 and N is the packed length."""
    batch, seq_q, heads, head_dim = q.shape
    _, block_d2 = head_chunks(head_dim, split_d)
    even_m, even_n = even_blocks(seq_q, k.shape[1], walked=BLOCK_N, resident=BLOCK_M, walks_queries=False,
                                 causal=causal, varlen=varlen is not None)
    longest_first = longest_first and (causal or varlen is not None)
    doc_args, blocks = (UNIFORM_ARGS, triton.cdiv(seq_q, BLOCK_M)) if varlen is None else \
        varlen.kernel_args(block_q=BLOCK_M, heaviest_first=longest_first, causal=causal)
    grid = (blocks, batch * heads)
    if blocks == 0:
        return
    _dq_kernel[grid[::-1] if longest_first else grid](
        Q=q, K=k, V=v, DO=do, DQ=dq, LSE=lse, DELTA=delta, **shape_args(q, k), **scale_args(scale), **doc_args,
        HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D2=block_d2, CAUSAL=causal,
        LONGEST_FIRST=longest_first, PRESCALED=prescale, EVEN_M=even_m, EVEN_N=even_n,
        num_warps=num_warps, num_stages=num_stages)
