"""The forget gate's host side (FLA's parallel_attn, issue 24): the kernels read G = cumsum(g) per sequence (per
document when packed) in LSE's layout [B, H, N], and write the two halves of dL/dG, which become dg here.

    score_ij += G_i - G_j  =>  dL/dG_t = sum_j dS_tj (t as a query) - sum_i dS_it (t as a key);
    G_t = sum_{s <= t} g_s  =>  dg_s = sum_{t >= s} dL/dG_t (a reverse cumsum within the sequence / document).

The reverse cumsum adds both halves up along the whole sequence: they must come from the same dS, so that the
rounding in delta (from the rounded O) cancels between them, or dg's error grows with N (bf16, N = 16k: rel_dg 0.07
to 0.24 measured on an H100 before this rule; results/h100/modifiers). Hence: every design writes both halves, and
no design prescales K in one pass and Q in the other (`check_prescale`): that rounds the scores two ways.
"""
from dataclasses import dataclass

import torch


@dataclass
class GateSums:
    """What a gated backward reads and writes, all fp32 [B, H, N] (packed [1, H, total]) like LSE:
    cumsum: G; as_query: sum_j dS_ij per query row (dQ pass); as_key: sum_i dS_ij per key column (dK/dV pass)."""
    cumsum: torch.Tensor
    as_query: torch.Tensor
    as_key: torch.Tensor

    def query_for_atomics(self) -> torch.Tensor:
        """as_query zeroed, for a one-kernel design that adds each step's per-query sums of dS by fp32 atomics
        (atomic, atomic_tma: both halves from the same dS, module doc)."""
        return self.as_query.zero_()


def _document_ids(varlen, tokens: int, device) -> torch.Tensor | None:
    """[total] document index of each packed token, or None for a dense batch."""
    if varlen is None:
        return None
    lens = torch.tensor(varlen.lens_q, device=device)
    return torch.repeat_interleave(torch.arange(len(lens), device=device), lens, output_size=tokens)


def _segmented_cumsum(x: torch.Tensor, varlen) -> torch.Tensor:
    """Cumulative sum of x [B, N, H] along N, restarting at every document of a packed batch (B = 1), in fp64."""
    total = x.double().cumsum(1)  # [B, N, H]
    if varlen is not None:  # minus what the earlier documents added
        starts = torch.tensor(varlen.cu_q_host[:-1], device=x.device)  # [docs]
        before = torch.cat([total.new_zeros(1, 1, x.shape[2]), total], dim=1)[:, starts]  # [1, docs, H]
        total = total - before[:, _document_ids(varlen, x.shape[1], x.device)]
    return total


def _segmented_reverse_cumsum(x: torch.Tensor, varlen) -> torch.Tensor:
    """sum_{s >= t} x_s within t's sequence / document: the sequence's total - the cumsum up to t + x_t, in fp64."""
    forward = _segmented_cumsum(x, varlen)  # [B, N, H]
    if varlen is None:
        totals = forward[:, -1:]  # [B, 1, H]
    else:
        last = torch.tensor(varlen.cu_q_host[1:], device=x.device) - 1  # [docs] (an empty document's is never read)
        totals = forward[:, last][:, _document_ids(varlen, x.shape[1], x.device)]  # [1, N, H]
    return totals - forward + x.double()


def check_prescale(gate, prescale: bool) -> None:
    """One-line ValueError for prescale with a forget gate (module doc); the designs' defaults turn it off."""
    if gate is not None and prescale:
        raise ValueError("prescale=true cannot run with the forget gate: K and Q scaled and rounded in different "
                         "passes make dg's two halves disagree (kernels/gate.py); set blocks.prescale=false")


def gate_cumsum(g: torch.Tensor, varlen=None) -> torch.Tensor:
    """g [B, N, H] (packed [total, H]) -> G [B, H, N] (packed [1, H, total]) fp32, contiguous."""
    g = g if varlen is None else g.unsqueeze(0)
    return _segmented_cumsum(g, varlen).float().transpose(1, 2).contiguous()


def gate_sums(g: torch.Tensor, varlen=None) -> GateSums:
    """G and two fresh (unwritten) row / column sum buffers for a gated backward."""
    cumsum = gate_cumsum(g, varlen)
    return GateSums(cumsum, torch.empty_like(cumsum), torch.empty_like(cumsum))


def gate_grad(sums: GateSums, varlen=None) -> torch.Tensor:
    """dg [B, N, H] (packed [total, H]) from the kernels' row and column sums of dS."""
    d_cumsum = (sums.as_query - sums.as_key).transpose(1, 2)  # [B, N, H]: dL/dG
    dg = _segmented_reverse_cumsum(d_cumsum, varlen).float()
    return dg if varlen is None else dg.squeeze(0)
