"""Packed variable-length batches (FlashAttention's varlen convention): documents laid end to end along
the token axis, q [total_q, H, D], k/v [total_k, Hkv, D], document d owning tokens
[cu_seqlens[d], cu_seqlens[d + 1]) of each.

`Packing` holds the cu_seqlens on the device and the lengths on the host, and builds (once per block
size) the table that maps every program of a varlen launch to one (document, block) pair, so no program
is launched for a block that lies outside every document (as FLA's `prepare_chunk_indices`).
"""
from typing import NamedTuple

import torch


class Documents(NamedTuple):
    """The packed-batch argument of a varlen-aware kernel: cu_seqlens_q / cu_seqlens_k int32 [docs + 1] and the
    (document, block) table int32 [programs, 2] (Packing.block_indices); None each for a dense batch."""
    cu_seqlens_q: torch.Tensor | None
    cu_seqlens_k: torch.Tensor | None
    block_indices: torch.Tensor | None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Packing:
    """cu_seqlens_q / cu_seqlens_k: int [docs + 1], 0 first, non-decreasing, last = total tokens.
    Raises a one-line ValueError on anything inconsistent. Empty documents (length 0) are allowed."""

    def __init__(self, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor | None = None,
                 total_q: int | None = None, total_k: int | None = None):
        cu_seqlens_k = cu_seqlens_q if cu_seqlens_k is None else cu_seqlens_k
        for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 2:
                raise ValueError(f"{name} must be a 1-D tensor [docs + 1], got "
                                 f"{tuple(cu.shape) if isinstance(cu, torch.Tensor) else type(cu).__name__}")
            if cu.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"{name} must be int32 or int64, got {cu.dtype}")
        if cu_seqlens_q.numel() != cu_seqlens_k.numel():
            raise ValueError(f"cu_seqlens_q and cu_seqlens_k give different document counts: "
                             f"{cu_seqlens_q.numel() - 1} vs {cu_seqlens_k.numel() - 1}")
        self.cu_q_host = tuple(int(x) for x in cu_seqlens_q.tolist())  # one host sync, here only
        self.cu_k_host = tuple(int(x) for x in cu_seqlens_k.tolist())
        for name, cu, total in (("cu_seqlens_q", self.cu_q_host, total_q), ("cu_seqlens_k", self.cu_k_host, total_k)):
            if cu[0] != 0:
                raise ValueError(f"{name} must start at 0, got {cu[0]}")
            if any(b < a for a, b in zip(cu, cu[1:])):
                raise ValueError(f"{name} must be non-decreasing, got {list(cu)}")
            if total is not None and cu[-1] != total:
                raise ValueError(f"{name} must end at the packed length {total}, got {cu[-1]}")
        self.lens_q = tuple(b - a for a, b in zip(self.cu_q_host, self.cu_q_host[1:]))
        self.lens_k = tuple(b - a for a, b in zip(self.cu_k_host, self.cu_k_host[1:]))
        self.cu_seqlens_q = cu_seqlens_q.to(torch.int32)  # the kernels read int32
        self.cu_seqlens_k = cu_seqlens_k.to(torch.int32) if cu_seqlens_k is not cu_seqlens_q else self.cu_seqlens_q
        self._tables: dict = {}

    @property
    def docs(self) -> int:
        return len(self.lens_q)

    @property
    def max_q(self) -> int:
        return max(self.lens_q)

    @property
    def max_k(self) -> int:
        return max(self.lens_k)

    def block_indices(self, block_q: int | None = None, block_k: int | None = None,
                      heaviest_first: bool = False, causal: bool = False) -> torch.Tensor:
        """int32 [programs, 2] on the device: (document, block) of each program. Document d gets
        max(cdiv(lens_q[d], block_q), cdiv(lens_k[d], block_k)) blocks (a side given as None counts 0).
        heaviest_first (one side given): the pairs sorted by the work of their block, most first (ties in
        document order), so the longest programs of a packed batch start in the first wave.
        Built once per arguments and cached, so a timed backward does no host work for it."""
        key = (block_q, block_k, heaviest_first, causal and heaviest_first)  # document order ignores causal
        if key not in self._tables:
            table = [(d, j)
                     for d, (nq, nk) in enumerate(zip(self.lens_q, self.lens_k))
                     for j in range(max(_cdiv(nq, block_q) if block_q else 0, _cdiv(nk, block_k) if block_k else 0))]
            if heaviest_first:
                table.sort(key=lambda pair: -self.block_work(*pair, block_q, block_k, causal))  # stable
            self._tables[key] = torch.tensor(table, dtype=torch.int32, device=self.cu_seqlens_q.device).reshape(-1, 2)
        return self._tables[key]

    def block_work(self, doc: int, block: int, block_q: int | None, block_k: int | None, causal: bool) -> int:
        """Rows the program of (doc, block) walks: for a resident key block (block_k), the queries that see it;
        for a resident query block (block_q), the keys it sees. Causal is bottom-right aligned per document:
        query i sees key j when j <= i + lens_k - lens_q."""
        if (block_q is None) == (block_k is None):
            raise ValueError("block_work orders tables of one side: give block_q or block_k")
        len_q, len_k = self.lens_q[doc], self.lens_k[doc]
        shift = len_k - len_q
        if block_k is not None:  # key block: queries i >= its first key - shift
            return len_q - min(len_q, max(0, block * block_k - shift)) if causal else len_q
        # query block: keys j <= its last query + shift
        return min(len_k, max(0, (block + 1) * block_q + shift)) if causal else len_k

    def kernel_args(self, block_q: int | None = None, block_k: int | None = None,
                    heaviest_first: bool = False, causal: bool = False) -> dict:
        """The keyword arguments every varlen-aware kernel takes (docs=, IS_VARLEN=), and its program count along
        the blocks axis."""
        table = self.block_indices(block_q, block_k, heaviest_first, causal)
        return dict(docs=Documents(self.cu_seqlens_q, self.cu_seqlens_k, table), IS_VARLEN=True), table.shape[0]


UNIFORM_ARGS = dict(docs=Documents(None, None, None), IS_VARLEN=False)  # a dense batch
