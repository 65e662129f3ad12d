"""Packed variable-length batches (cu_seqlens): every Triton design against the fp32 reference's per-document
loop, o, dq, dk, dv, on odd document lengths; the (document, block) program table; FLOP counting; bad input."""
import pytest
import torch

from kernels.varlen import Packing
from tests.test_variants import SMALL_BLOCKS, TRITON_VARIANTS, designs, small_blocks
from variants import Problem, TritonVariant, attention, get
from variants.accuracy import REL_TOL, error
from variants.reference import reference_grads

# The Triton designs that serve packed batches (`supports_varlen`, from the registry): every design that runs in the
# interpreter (asserted below); a new one without varlen is refused, tested below.
VARLEN_VARIANTS = [name for name in TRITON_VARIANTS if get(name).supports_varlen]

# (lens_q, lens_k or None (= lens_q), H, Hkv, D): one document; many tiny ones incl. length 1; lengths that
# are not multiples of any block; Nq != Nk per document (incl. Nq > Nk: rows that see no key); GQA / MQA;
# empty documents (length 0) on either side.
PACKINGS = {
    "one-doc": ([45], None, 2, 2, 32),
    "tiny-docs": ([1, 1, 2, 3, 1, 5, 1, 16], None, 2, 1, 16),
    "odd-lengths-gqa": ([17, 33, 50], None, 4, 2, 40),
    "nq-ne-nk": ([5, 40, 17, 9], [12, 33, 17, 1], 4, 2, 32),
    "empty-docs": ([0, 7, 0, 20, 3], [4, 7, 0, 0, 19], 2, 1, 32),
}
DTYPES = [torch.float32, torch.float16]


def cu(lens) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def packed_inputs(lens_q, lens_k, heads, kv_heads, head_dim, dtype, device):
    """Fresh random q, do [total_q, H, D], k, v [total_k, Hkv, D] and the cu_seqlens on `device`."""
    lens_k = lens_q if lens_k is None else lens_k
    q, do = (torch.randn(sum(lens_q), heads, head_dim, device=device, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(sum(lens_k), kv_heads, head_dim, device=device, dtype=dtype) for _ in range(2))
    return q, k, v, do, cu(lens_q).to(device), cu(lens_k).to(device)


def run_and_check_packed(variant, q, k, v, do, cu_q, cu_k, causal, blocks=None):
    if not get(variant).runs_in_interpreter:  # a hardware-specific design (ws: sm90, fp16 / bf16, its head dims)
        lens_q, lens_k = (tuple((c[1:] - c[:-1]).tolist()) for c in (cu_q, cu_k))
        problem = Problem(1, max(lens_q), max(lens_k), q.shape[1], k.shape[1], q.shape[2], causal, q.dtype,
                          q.device.type, lens_q, lens_k)
        reason = get(variant).supports(problem)
        if reason:
            pytest.skip(f"{variant} refuses this problem: {reason}")
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o = attention(*leaves, causal=causal, variant=variant, blocks=blocks, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    o.backward(do)
    ref = reference_grads(q, k, v, do, causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    for name, out, expected in zip(("o", "dq", "dk", "dv"), (o, *(t.grad for t in leaves)), ref):
        assert out.shape == expected.shape, name
        err = error(out, expected)
        assert err.ok(q.dtype), f"{variant} {name}: rel err {err.rel:.2e} > {REL_TOL[q.dtype]:.0e} (max abs {err.max_abs:.2e})"


@pytest.mark.slow  # the fast GPU tier keeps the fp16 packed cases (docs/testing.md)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("packing", list(PACKINGS))
@pytest.mark.parametrize("variant", designs(VARLEN_VARIANTS))
def test_packed_matches_reference_fp32(variant, packing, causal, device):
    torch.manual_seed(hash((variant, packing, causal)) % 2**31)
    inputs = packed_inputs(*PACKINGS[packing], torch.float32, device)
    run_and_check_packed(variant, *inputs, causal, blocks=small_blocks(variant))


@pytest.mark.parametrize("packing", ["tiny-docs", "nq-ne-nk"])
@pytest.mark.parametrize("variant", designs(VARLEN_VARIANTS))
def test_packed_matches_reference_fp16(variant, packing, device):
    torch.manual_seed(hash((variant, packing)) % 2**31)
    run_and_check_packed(variant, *packed_inputs(*PACKINGS[packing], torch.float16, device), True,
                         blocks=small_blocks(variant))


@pytest.mark.slow  # the fast GPU tier keeps the fp16 packed cases (docs/testing.md)
@pytest.mark.parametrize("variant,blocks", [
    ("atomic", {"deterministic": True}), ("atomic", {"longest_first": True}),
    ("two_pass", {"longest_first": True, "prescale": True}), ("two_pass", {"split_dkdv": True}),
    ("fused", {"prescale": False}),
    ("atomic_tma", {"deterministic": True}), ("atomic_tma", {"longest_first": True}),
    ("atomic_tma", {"tma_load": False}), ("atomic_tma", {"tma_load": False, "warp_specialize": True}),
], ids=["atomic-deterministic", "atomic-longest-first", "two_pass-longest-first-prescale", "two_pass-split-dkdv",
        "fused-no-prescale",
        "atomic_tma-deterministic", "atomic_tma-longest-first", "atomic_tma-pointer-loads",
        "atomic_tma-pointer-loads-warp-specialize"])
def test_packed_design_switches(variant, blocks, device):
    inputs = packed_inputs(*PACKINGS["nq-ne-nk"], torch.float32, device)
    run_and_check_packed(variant, *inputs, True, blocks={**small_blocks(variant), **blocks})


@pytest.mark.slow  # the fast GPU tier keeps the fp16 packed cases (docs/testing.md)
@pytest.mark.parametrize("variant", designs(VARLEN_VARIANTS))
def test_packed_default_blocks(variant, device):
    """The per-problem default blocks (the ones a sweep uses)."""
    run_and_check_packed(variant, *packed_inputs([70, 3, 129], None, 2, 1, 64, torch.float16, device), True)


@pytest.mark.slow  # fp32 kernels: their own compiles on a cold GPU cache
def test_equal_documents_match_the_uniform_batch(device):
    """A packing of B equal documents is the uniform [B, N] problem: same o and gradients, same FLOPs."""
    b, n, h, d = 3, 37, 2, 32
    q, k, v, do = (torch.randn(b, n, h, d, device=device) for _ in range(4))
    uniform = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    attention(*uniform, causal=True, variant="two_pass").backward(do)
    packed = [t.detach().reshape(b * n, h, d).clone().requires_grad_(True) for t in (q, k, v)]
    o = attention(*packed, causal=True, variant="two_pass", cu_seqlens_q=cu([n] * b).to(device))
    o.backward(do.reshape(b * n, h, d))
    for u, p in zip(uniform, packed):
        torch.testing.assert_close(p.grad.reshape(b, n, h, d), u.grad, rtol=1e-5, atol=1e-5)
    flops_uniform = Problem(b, n, n, h, h, d, True, torch.float32, "cpu").backward_flops()
    assert Problem.packed([n] * b, [n] * b, h, h, d, True, torch.float32, "cpu").backward_flops() == flops_uniform


def test_block_table_covers_every_document_block_once():
    packing = Packing(cu([0, 5, 40, 1, 0]), cu([3, 0, 33, 70, 0]))
    table = packing.block_indices(block_q=16, block_k=32).tolist()
    expected = [(d, j) for d, n in enumerate([1, 1, 3, 3, 0]) for j in range(n)]  # max(cdiv(q, 16), cdiv(k, 32))
    assert [tuple(x) for x in table] == expected
    assert packing.block_indices(block_q=16) is packing.block_indices(block_q=16)  # cached: no work when timed
    assert packing.block_indices(block_k=32).shape == (1 + 0 + 2 + 3 + 0, 2)


def test_pairs_are_counted_per_document():
    p = Problem.packed([4, 3], [4, 5], 2, 2, 8, True, torch.float32, "cpu")
    # doc 0: 4 x 4 causal -> 8 (FlashAttention's halving); doc 1: Nq=3, Nk=5 bottom-right -> 3 + 4 + 5 = 12
    assert p.total_pairs == 20 and p.forward_flops() == 4 * 2 * 20 * 8
    assert Problem.packed([4, 3], [4, 5], 2, 2, 8, False, torch.float32, "cpu").total_pairs == 16 + 15


@pytest.mark.parametrize("cu_q, message", [
    (torch.tensor([1, 5], dtype=torch.int32), "must start at 0"),
    (torch.tensor([0, 6, 5], dtype=torch.int32), "non-decreasing"),
    (torch.tensor([0, 4], dtype=torch.int32), "must end at the packed length 5"),
    (torch.tensor([0, 5.0]), "int32 or int64"),
    (torch.tensor([[0, 5]], dtype=torch.int32), "1-D"),
])
def test_bad_cu_seqlens_is_one_line(cu_q, message, device):
    q = torch.randn(5, 2, 16, device=device)
    with pytest.raises(ValueError, match=message) as info:
        attention(q, q, q, cu_seqlens_q=cu_q.to(device))
    assert "\n" not in str(info.value)


def test_bad_packed_shapes_are_one_line(device):
    q = torch.randn(5, 2, 16, device=device)
    with pytest.raises(ValueError, match="3-D"):
        attention(q[None], q[None], q[None], cu_seqlens_q=cu([5]).to(device))
    with pytest.raises(ValueError, match="different document counts"):
        attention(q, q, q, cu_seqlens_q=cu([5]).to(device), cu_seqlens_k=cu([2, 3]).to(device))
    with pytest.raises(ValueError, match="max_seqlen_q=3 is shorter"):
        attention(q, q, q, cu_seqlens_q=cu([5]).to(device), max_seqlen_q=3)
    with pytest.raises(ValueError, match="layout 'bnhd'"):
        attention(q, q, q, cu_seqlens_q=cu([5]).to(device), layout="bhnd")


def test_a_design_without_varlen_says_unsupported(device):
    """A new TritonVariant that does not declare supports_varlen refuses packed problems with a reason."""
    class NoVarlen(TritonVariant):
        name = "no_varlen"
    problem = Problem.packed([3, 4], [3, 4], 2, 2, 16, True, torch.float16, device)
    assert "packed variable-length" in NoVarlen().supports(problem)
    for name in VARLEN_VARIANTS + ["reference"]:
        assert get(name).varlen_reason(problem) is None
    # every Triton design that runs in the interpreter runs the packed matrix above (a Gluon design may not serve
    # packed batches yet: it says so through supports(), checked above); the four that served them still do
    assert {name for name in TRITON_VARIANTS if get(name).runs_in_interpreter} <= set(VARLEN_VARIANTS)
    assert {"two_pass", "atomic", "fused", "atomic_tma"} <= set(VARLEN_VARIANTS)


def test_atomic_tma_refuses_no_packed_mode(device):
    """Every atomic_tma mode is accepted for a packed batch (each runs in the matrix / switches above)."""
    variant = get("atomic_tma")
    problem = Problem.packed([0, 7, 20], [4, 7, 0], 2, 1, 32, True, torch.float16, device)
    assert variant.supports(problem) is None
    for mode in ({"deterministic": True}, {"longest_first": True}, {"tma_load": False}, {"tma_reduce": False},
                 {"warp_specialize": True}):
        assert variant.make_blocks(problem, mode).as_dict().items() >= mode.items()


@pytest.mark.parametrize("version, broken", [((2, 10), True), ((2, 11), True), ((2, 12), False), ((3, 0), False)])
def test_cudnn_varlen_refused_on_torch_with_the_dq_accumulator_bug(monkeypatch, version, broken):
    """torch <= 2.11 sizes the ragged cuDNN backward's dQ accumulator from the head dim (measured wrong on an H100):
    sdpa_cudnn refuses packed batches there with the reason; on newer torch the accuracy gate decides."""
    import variants.sdpa as sdpa
    monkeypatch.setattr(sdpa, "torch_version", lambda: version)
    reason = get("sdpa_cudnn").varlen_op_reason()
    if broken:
        assert reason is not None and "186142" in reason and "dQ" in reason
    else:
        assert reason is None
    assert get("sdpa_flash").varlen_op_reason() is None  # FA2 varlen is not affected


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", list(PACKINGS))
def test_flex_document_block_tables_match_torchs_dense_block_mask(name, causal):
    """The flex baseline's block tables, computed from document ranges, equal the partial / full blocks that torch's
    create_block_mask derives from the dense [total_q, total_k] document mask (small blocks: many boundaries)."""
    from torch.nn.attention.flex_attention import create_block_mask

    from variants.flex import document_block_tables
    lens_q, lens_k, *_ = PACKINGS[name]
    lens_k = lens_q if lens_k is None else lens_k
    cu_q, cu_k = tuple(cu(lens_q).tolist()), tuple(cu(lens_k).tolist())
    doc_q = torch.repeat_interleave(torch.arange(len(lens_q)), torch.tensor(lens_q))
    doc_k = torch.repeat_interleave(torch.arange(len(lens_k)), torch.tensor(lens_k))
    shift = torch.tensor([bk - bq for bq, bk in zip(cu_q[1:], cu_k[1:])])

    def document_mask(b, h, q, k):
        same = doc_q[q] == doc_k[k]
        return same & (k <= q + shift[doc_q[q]]) if causal else same

    block = 8
    dense = create_block_mask(document_mask, None, None, cu_q[-1], cu_k[-1], device="cpu", BLOCK_SIZE=block)
    partial, full = document_block_tables(cu_q, cu_k, causal, block)

    def table(counts, indices):  # [1, 1, n_qb], [1, 1, n_qb, n_kb] -> [n_qb, n_kb] bool
        marked = torch.zeros_like(partial)
        for row, (n, idx) in enumerate(zip(counts[0, 0].tolist(), indices[0, 0])):
            marked[row, idx[:n].long()] = True
        return marked

    assert torch.equal(partial, table(dense.kv_num_blocks, dense.kv_indices))
    assert torch.equal(full, table(dense.full_kv_num_blocks, dense.full_kv_indices))
    assert partial.any()
    if name == "one-doc":  # 45 tokens in blocks of 8: whole blocks inside the document
        assert full.any()


def brute_force_work(lens_q, lens_k, doc, block, block_q, block_k, causal):
    """Rows a (document, block) program walks, counted pair by pair from the mask (independent of block_work)."""
    nq, nk = lens_q[doc], lens_k[doc]
    visible = [[not causal or j <= i + nk - nq for j in range(nk)] for i in range(nq)]
    if block_k is not None:  # resident key block: the queries that see one of its keys
        keys = range(block * block_k, min((block + 1) * block_k, nk))
        return sum(any(visible[i][j] for j in keys) for i in range(nq))
    queries = range(block * block_q, min((block + 1) * block_q, nq))
    return sum(any(visible[i][j] for i in queries) for j in range(nk))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("side", ["keys", "queries"])
@pytest.mark.parametrize("name", ["tiny-docs", "odd-lengths-gqa", "nq-ne-nk", "empty-docs"])
def test_heaviest_first_table_is_the_same_programs_by_work(name, side, causal):
    """longest_first on a packed batch: the (document, block) table holds the same pairs, sorted by the rows each
    program walks (most first, ties in document order), the work counted here pair by pair from the mask."""
    lens_q, lens_k, *_ = PACKINGS[name]
    lens_k = lens_q if lens_k is None else lens_k
    packing = Packing(cu(lens_q), cu(lens_k))
    block_q, block_k = (None, 8) if side == "keys" else (8, None)
    plain = [tuple(p) for p in packing.block_indices(block_q, block_k).tolist()]
    ordered = [tuple(p) for p in packing.block_indices(block_q, block_k, heaviest_first=True, causal=causal).tolist()]
    assert sorted(ordered) == sorted(plain)
    work = [brute_force_work(lens_q, lens_k, d, j, block_q, block_k, causal) for d, j in ordered]
    assert work == [packing.block_work(d, j, block_q, block_k, causal) for d, j in ordered]
    assert work == sorted(work, reverse=True)
    assert ordered == sorted(plain, key=lambda p: -work[ordered.index(p)])  # stable: ties keep document order


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", ["two_pass", "atomic_tma"])
def test_packed_longest_first_matches_reference(variant, causal, device):
    """The heaviest-first program tables (dK/dV: key blocks; dQ: query blocks, read from the front)."""
    inputs = packed_inputs(*PACKINGS["odd-lengths-gqa"], torch.float16, device)
    run_and_check_packed(variant, *inputs, causal, blocks={**small_blocks(variant), "longest_first": True})


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_packed_split_head_dim(causal, device):
    """two_pass with the head dim as two register blocks (40 = 32 + 16, split dK/dV) on odd documents with GQA."""
    inputs = packed_inputs(*PACKINGS["odd-lengths-gqa"], torch.float32, device)
    run_and_check_packed("two_pass", *inputs, causal,
                         blocks={**SMALL_BLOCKS["two_pass"], "split_d": True, "split_dkdv": True})
