"""Issue 47: a value head dim of its own (MLA: d_qk 192, d_v 128; here 48 / 32 for the interpreter) and learnable
per-head sinks (GPT-OSS), against the fp32 reference, with fresh random inputs, odd lengths, GQA, causal and not,
poisoned outputs (tests/conftest.py); the sink's gradient against autograd of the reference; the generalised FLOPs;
designs that cannot take a case refuse it with the reason. The cases live on the test device (tests/conftest.py
DEVICE): the Triton interpreter on a CPU, the compiled kernels on a GPU, where the matrix runs fp16 (fp32 on the CPU:
the interpreter's exact math)."""
import math
import zlib

import pytest
import torch

from kernels.sink import sink_grad
from tests.conftest import DEVICE
from tests.test_variants import designs, small_blocks
from variants import TritonVariant, attention, get, names
from variants.accuracy import REL_TOL, error
from variants.op import through_operator
from variants.problem import Problem
from variants.reference import reference_forward, reference_grads

STOCK = ["two_pass", "atomic", "fused", "atomic_tma"]  # the stock Triton designs
HEAD_DIM_V = ["two_pass", "atomic", "fused"]  # those that take d_v != d_qk
ON_GPU = DEVICE == "cuda"
# the matrix's dtype: fp32 in the interpreter (exact), fp16 on a GPU (the dtype the designs train in; fp32 there
# runs slow ieee dots, and the Gluon designs refuse it); test_half_precision adds fp16 on the CPU and bf16 on a GPU
DTYPE = torch.float16 if ON_GPU else torch.float32
# the forward's LSE against torch.logsumexp in fp32: the GPU's exp2 / log2 are approximate (a few ulp)
LSE_TOL = 2e-4 if ON_GPU else 1e-5


def make_case(b, nq, nk, h, hkv, d, dv, dtype=DTYPE, seed=0, device=DEVICE):
    """q, do [B, Nq, H, D|Dv], k [B, Nk, Hkv, D], v [B, Nk, Hkv, Dv] and sink logits fp32 [H], fresh per seed, on
    `device` (drawn on the CPU, so a seed gives the same numbers everywhere)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, nq, h, d, generator=gen)
    k = torch.randn(b, nk, hkv, d, generator=gen)
    v = torch.randn(b, nk, hkv, dv, generator=gen)
    do = torch.randn(b, nq, h, dv, generator=gen)
    sink = torch.randn(h, generator=gen) + 1.0  # of the scores' size: a visible share of every row
    return (*(t.to(device, dtype) for t in (q, k, v, do)), sink.to(device))


def check(variant, q, k, v, do, sink, causal, g=None, blocks=None, **options):
    """attention() forward + backward vs reference_grads: o, dq, dk, dv, (with a gate g) dg and (with a sink) dsink.
    blocks: the design's (default: its small test blocks, tests/test_variants.py). options: attention()'s
    window_size / softcap / cu_seqlens_*, which reference_grads takes by the same names."""
    extra = [t for t in (g, sink) if t is not None]
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, *extra)]
    blocks = small_blocks(variant) if blocks is None else blocks
    o = attention(*leaves[:3], causal=causal, variant=variant, blocks=blocks,
                  g=leaves[3] if g is not None else None, sink=leaves[-1] if sink is not None else None, **options)
    o.backward(do)
    ref = reference_grads(q, k, v, do, causal, g=g, sink=sink, **options)
    names = ("o", "dq", "dk", "dv") + (("dg",) if g is not None else ()) + (("dsink",) if sink is not None else ())
    for name, out, expected in zip(names, (o, *(t.grad for t in leaves)), ref):
        assert out.shape == expected.shape, name
        assert torch.isfinite(out).all(), f"{variant} {name}: non-finite (an element left unwritten?)"
        err = error(out, expected)
        assert err.ok(q.dtype), f"{variant} {name}: rel err {err.rel:.2e} > {REL_TOL[q.dtype]:.0e}"


# (B, Nq, Nk, H, Hkv, D, Dv): odd lengths, GQA, Nq < Nk and Nq > Nk (causal: rows that see no key)
SHAPES = [
    pytest.param((2, 37, 53, 4, 2, 48, 32), id="B2-Nq37-Nk53-H4-HKV2-D48-Dv32"),
    pytest.param((1, 53, 37, 2, 1, 48, 32), id="B1-Nq53-Nk37-H2-HKV1-D48-Dv32"),
    pytest.param((1, 37, 37, 2, 2, 48, 48), id="B1-N37-H2-D48-Dv48"),
]


@pytest.mark.parametrize("variant", designs(STOCK))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_sink", [False, True], ids=["no-sink", "sink"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matches_reference(variant, shape, with_sink, causal):
    b, nq, nk, h, hkv, d, dv = shape
    q, k, v, do, sink = make_case(*shape, seed=zlib.crc32(f"{variant}{shape}{with_sink}{causal}".encode()))
    if dv != d and variant not in HEAD_DIM_V:
        with pytest.raises(ValueError, match="does not implement a value head dim of its own"):
            attention(q, k, v, causal=causal, variant=variant, sink=sink if with_sink else None)
        return
    check(variant, q, k, v, do, sink if with_sink else None, causal)


HALF = [torch.float16] + ([torch.bfloat16] if ON_GPU else [])  # interpreter bf16 dots are wrong (test_variants)


@pytest.mark.parametrize("dtype", HALF, ids=lambda dtype: str(dtype).removeprefix("torch."))
@pytest.mark.parametrize("variant", designs(["two_pass", "atomic"]))
def test_half_precision(variant, dtype):
    q, k, v, do, sink = make_case(1, 37, 53, 4, 2, 48, 32, dtype=dtype, seed=3)
    check(variant, q, k, v, do, sink, True)


@pytest.mark.parametrize("variant", designs(["two_pass", "fused"]))
def test_packed_documents(variant):
    """A packed batch (cu_seqlens) with v of its own head dim and a sink: one sink per head across the documents."""
    lens_q, lens_k = [13, 0, 29], [21, 7, 17]
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    q, k, v, do, sink = make_case(1, sum(lens_q), sum(lens_k), 4, 2, 48, 32, seed=5)
    q, k, v, do = (t[0] for t in (q, k, v, do))  # [total, H, D]
    check(variant, q, k, v, do, sink, True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)


@pytest.mark.parametrize("variant", designs(["two_pass", "atomic"]))
@pytest.mark.parametrize("causal, modifiers", [
    (False, dict(window_size=(9, 4), softcap=5.0)), (True, dict(window_size=(11, 0))), (True, dict(gate=True))],
    ids=["window-softcap", "causal-window", "gate"])
def test_with_score_modifiers(variant, causal, modifiers):
    """Dv and the sink combined with a sliding window, softcap and the forget gate (rows the window leaves empty:
    O = 0, all of the row's weight on the sink)."""
    shape = (1, 41, 41, 4, 2, 48, 32) if modifiers.get("gate") else (1, 37, 53, 4, 2, 48, 32)
    q, k, v, do, sink = make_case(*shape, seed=19)
    options = {key: value for key, value in modifiers.items() if key != "gate"}
    g = torch.nn.functional.logsigmoid(torch.randn(1, 41, 4) + 2).to(DEVICE) if modifiers.get("gate") else None
    check(variant, q, k, v, do, sink, causal, g=g, **options)


def test_through_the_operator():
    """The operator path (what torch.compile traces) takes Dv and the sink and returns dsink too."""
    q, k, v, do, sink = make_case(1, 37, 53, 2, 1, 48, 32, seed=7)
    with through_operator():
        check("two_pass", q, k, v, do, sink, True)


def test_sink_enters_the_lse():
    """The forward's LSE (base 2) is log2(exp(sink) + sum_j exp(s_ij)) per row, and a row that sees no key gets
    O = 0 and LSE = the sink."""
    from kernels.common import LOG2E
    q, k, v, _, sink = make_case(1, 7, 5, 2, 2, 16, 16, dtype=torch.float32, seed=11)
    scale = 0.25
    o, lse = get("two_pass").forward(q, k, v, True, scale, sink=sink)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale  # [B, H, Nq, Nk]
    visible = torch.arange(5, device=DEVICE)[None, :] <= torch.arange(7, device=DEVICE)[:, None] - 2  # j <= i - 2
    scores = scores.masked_fill(~visible, float("-inf"))
    full = torch.cat([scores, sink[None, :, None, None].expand(1, 2, 7, 1)], dim=-1)
    torch.testing.assert_close(lse, torch.logsumexp(full, dim=-1) * LOG2E, atol=LSE_TOL, rtol=LSE_TOL)
    assert (o[:, :2] == 0).all() and torch.allclose(lse[..., :2], sink[None, :, None] * LOG2E)


def test_reference_sink_is_one_more_softmax_column():
    """Independent math: softmax over [scores, sink] with the sink's column dropped; sink -> -inf is no sink."""
    q, k, v, _, sink = make_case(2, 9, 11, 3, 3, 8, 5, dtype=torch.float32, seed=13, device="cpu")  # math only
    scale = 1 / math.sqrt(8)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    weights = torch.exp(scores) / (torch.exp(scores).sum(-1, keepdim=True) + torch.exp(sink)[None, :, None, None])
    want = torch.einsum("bhqk,bkhd->bqhd", weights, v)
    torch.testing.assert_close(reference_forward(q, k, v, sink=sink), want, atol=1e-5, rtol=1e-5)
    no_sink = torch.full((3,), float("-inf"))
    torch.testing.assert_close(reference_forward(q, k, v, sink=no_sink), reference_forward(q, k, v))
    assert (reference_forward(q, k, v, sink=sink) - reference_forward(q, k, v)).abs().max() > 1e-2


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sink_grad_formula_matches_autograd(causal):
    """kernels.sink.sink_grad (-sum_rows exp(sink - LSE) * delta, LSE base 2) against autograd of the reference."""
    q, k, v, do, sink = make_case(2, 13, 17, 4, 2, 16, 8, dtype=torch.float32, seed=17)
    o, lse = get("two_pass").forward(q, k, v, causal, 0.25, sink=sink)
    delta = (o * do).sum(-1).transpose(1, 2)  # [B, H, Nq]
    want = reference_grads(q, k, v, do, causal, 0.25, sink=sink)[-1]
    torch.testing.assert_close(sink_grad(sink, lse, delta), want, atol=10 * LSE_TOL, rtol=10 * LSE_TOL)
    assert want.abs().min() > 1e-4  # every head's gradient can be told from zero


def test_flops_generalise_and_equal_dims_give_todays_numbers():
    for causal in (False, True):
        for d in (48, 64, 128, 192):
            p = Problem(2, 4096, 4096, 16, 16, d, causal, torch.bfloat16, "cuda")
            pairs = 4096 * 4096 / (2 if causal else 1)
            assert p.forward_flops() == 4.0 * 2 * 16 * pairs * d  # the old 4 * B * H * pairs * D
            assert p.backward_flops() == 2.5 * p.forward_flops()  # the old FlashAttention convention
            same = Problem(2, 4096, 4096, 16, 16, d, causal, torch.bfloat16, "cuda", head_dim_v=d)
            assert same.backward_flops() == p.backward_flops()
        mla = Problem(2, 4096, 4096, 16, 16, 192, causal, torch.bfloat16, "cuda", head_dim_v=128)
        pairs = 4096 * 4096 / (2 if causal else 1)
        assert mla.forward_flops() == 2 * 2 * 16 * pairs * (192 + 128)
        assert mla.backward_flops() == 2 * 2 * 16 * pairs * (3 * 192 + 2 * 128)


def test_executed_flops_count_each_matmul_by_its_head_dim():
    """two_pass: S, dK, S, dQ (and S again when split) over D and dP, dV, dP over Dv; atomic and ws: S, dK, dQ over D
    and dP, dV over Dv; ws_two_pass (and ws deterministic): S, dK, S, dQ over D and dP, dV, dP over Dv."""
    for causal in (False, True):
        mla = Problem(1, 128, 128, 4, 4, 192, causal, torch.float16, "cuda", head_dim_v=128)
        same = Problem(1, 128, 128, 4, 4, 192, causal, torch.float16, "cuda")
        unit = 2 * 4 * mla.total_pairs
        two_pass, atomic = get("two_pass"), get("atomic")
        blocks = two_pass.default_blocks(mla)
        split = int(blocks.split_dkdv)  # the split dK/dV pass computes S once more
        assert two_pass.executed_flops(mla, blocks) == unit * ((4 + split) * 192 + 3 * 128)
        same_blocks = two_pass.default_blocks(same)
        assert two_pass.executed_flops(same, same_blocks) == unit * (7 + same_blocks.split_dkdv) * 192  # as before
        assert atomic.executed_flops(mla, atomic.Blocks()) == unit * (3 * 192 + 2 * 128) == mla.backward_flops()
        ws, ws_two_pass = get("ws"), get("ws_two_pass")  # ws: S, dK, dQ over D, dP, dV over Dv; deterministic and
        assert ws.executed_flops(mla, ws.Blocks()) == mla.backward_flops()  # ws_two_pass: S, dP again in the dQ pass
        assert ws.executed_flops(mla, ws.Blocks(deterministic=True)) == unit * (4 * 192 + 3 * 128)
        assert ws_two_pass.executed_flops(mla, ws_two_pass.Blocks()) == unit * (4 * 192 + 3 * 128)
        assert ws.executed_flops(same, ws.Blocks()) == unit * 5 * 192  # as before


def test_problem_reads_the_value_head_dim():
    q, k, v = torch.zeros(1, 5, 4, 48), torch.zeros(1, 7, 2, 48), torch.zeros(1, 7, 2, 32)
    p = Problem.from_tensors(q, k, v, False)
    assert (p.head_dim, p.head_dim_v, p.value_dim) == (48, 32, 32)
    assert Problem.from_tensors(q, k, k, False).head_dim_v is None
    with pytest.raises(ValueError, match="k and v shapes differ"):
        Problem.from_tensors(q, k, torch.zeros(1, 6, 2, 32), False)


@pytest.mark.parametrize("sink, match", [
    (torch.zeros(3), r"shape \(4,\)"), (torch.zeros(4, dtype=torch.float16), "must be fp32"),
    (torch.zeros(1, 4), r"shape \(4,\)")], ids=["wrong-heads", "fp16", "2-D"])
def test_bad_sinks_are_refused(sink, match):
    q, k, v, _, _ = make_case(1, 5, 5, 4, 2, 16, 16)
    with pytest.raises(ValueError, match=match):
        attention(q, k, v, variant="two_pass", sink=sink.to(DEVICE))


GLUON = ["ws", "ws_two_pass"]  # the Gluon designs: take the sink (their backward reads the LSE that carries it) and Dv
OTHERS = [n for n in names() if n not in STOCK + GLUON + ["reference", "fa4", "flex"]]  # flex: tests/test_flex_sink.py


@pytest.mark.parametrize("variant", OTHERS)
def test_other_designs_refuse_with_the_reason(variant):
    """SDPA refuses the sink (flex takes it: tests/test_flex_sink.py), and those that do not take Dv != D say so
    (one line)."""
    mla = Problem(1, 64, 64, 2, 2, 192, False, torch.bfloat16, "cuda", head_dim_v=128)
    sink = Problem(1, 64, 64, 2, 2, 128, False, torch.bfloat16, "cuda", sink=True)
    reason = get(variant).problem_reason(sink) or get(variant).supports(sink)
    assert reason and "sink" in reason and "\n" not in reason, reason
    if variant in ("sdpa_cudnn", "sdpa_efficient"):  # they take Dv != D (dense)
        assert get(variant).mla_reason(mla) is None
    else:
        reason = get(variant).mla_reason(mla) if isinstance(get(variant), TritonVariant) else get(variant).supports(mla)
        assert reason and "value head dim" in reason, reason


@pytest.mark.parametrize("variant", GLUON)
def test_gluon_designs_take_a_value_head_dim_of_their_own(variant):
    """ws and ws_two_pass take Dv != D where both are head dims their tiles cover (MLA's 192 / 128, 128 / 64, 64 /
    128), with a sink too; another Dv is refused in one line naming it."""
    assert get(variant).supports_head_dim_v
    for d, dv in ((192, 128), (128, 64), (64, 128), (256, 128)):
        for sink in (False, True):
            problem = Problem(1, 64, 64, 2, 2, d, True, torch.bfloat16, "cuda", head_dim_v=dv, sink=sink)
            assert get(variant).problem_reason(problem) is None, (d, dv, sink)
    reason = get(variant).problem_reason(Problem(1, 64, 64, 2, 2, 128, True, torch.bfloat16, "cuda", head_dim_v=80))
    assert reason and "value head dims" in reason and "80" in reason and "\n" not in reason, reason


@pytest.mark.parametrize("variant", GLUON)
def test_gluon_designs_take_the_sink(variant):
    """ws and ws_two_pass take a sink on any device's rule (problem_reason: no GPU asked), also packed and (ws) with
    a window; a dtype they do not run is still refused for the dtype, not the sink."""
    for extra in (dict(), dict(lens_q=(64, 37), lens_k=(64, 50))):
        problem = Problem(1, 64, 64, 2, 2, 128, True, torch.bfloat16, "cuda", sink=True, **extra)
        assert get(variant).supports_sink and get(variant).problem_reason(problem) is None, extra
    reason = get(variant).problem_reason(Problem(1, 64, 64, 2, 2, 128, True, torch.float32, "cuda", sink=True))
    assert reason and "sink" not in reason and "fp16 and bf16" in reason, reason


def test_stock_designs_declare_what_they_take():
    assert all(get(v).supports_sink for v in STOCK)
    assert [v for v in STOCK if get(v).supports_head_dim_v] == HEAD_DIM_V
    reason = get("atomic_tma").problem_reason(Problem(1, 64, 64, 2, 2, 192, False, torch.float16, "cuda",
                                                      head_dim_v=128))
    assert reason == "atomic_tma does not implement a value head dim of its own (head_dim 192, head_dim_v 128)"


@pytest.mark.parametrize("variant", HEAD_DIM_V)
def test_value_tiles_are_sized_by_dv_not_padded_to_d(monkeypatch, variant):
    """Leftover 1 of issue 47: with D 48 (register block 64) and Dv 16, every stock kernel that reads V / dO / O or
    writes dV gets HEAD_DIM_V 16 and BLOCK_DV 16: P V, dP = dO V^T and dV = P^T dO run over 16 columns, not
    padded to D's 64; and the result is the reference's."""
    import kernels.dkdv_dq
    import kernels.forward
    import kernels.fused
    seen = []
    for module in (kernels.dkdv_dq, kernels.forward, kernels.fused):
        real = module.launch

        def spy(kernel, grid, *args, _real=real, **kw):
            # the forward passes the dims as keywords; the backward kernels in their step records (CFG; fused: DKDV, DQ)
            records = [kw[name]._asdict() for name in ("CFG", "DKDV", "DQ") if hasattr(kw.get(name), "_asdict")]
            for dims in [kw] + records:
                if "BLOCK_DV" in dims:
                    seen.append((dims["HEAD_DIM"], dims["BLOCK_D"], dims["HEAD_DIM_V"], dims["BLOCK_DV"]))
            return _real(kernel, grid, *args, **kw)
        monkeypatch.setattr(module, "launch", spy)
    q, k, v, do, sink = make_case(1, 21, 21, 2, 1, 48, 16)
    check(variant, q, k, v, do, sink, True)
    assert len(seen) >= 2 and set(seen) == {(48, 64, 16, 16)}, seen


# The Gluon designs on an sm90 GPU (skipped elsewhere: Gluon does not run in the interpreter). (B, Nq, Nk, H, Hkv, D):
# odd lengths that leave tails, GQA 2:1 and 4:1, Nq > Nk (causal: rows that see no key, whose LSE is the sink's),
# head dims 64 and 128.
ON_HOPPER = ON_GPU and torch.cuda.get_device_capability()[0] == 9
GLUON_SINK_SHAPES = [(2, 200, 333, 4, 2, 64), (1, 333, 200, 4, 1, 128), (1, 77, 77, 2, 2, 64)]
GLUON_DTYPES = [torch.float16, torch.bfloat16]
needs_hopper = pytest.mark.skipif(not ON_HOPPER, reason="the Gluon designs need an sm90 GPU")


@needs_hopper
@pytest.mark.parametrize("dtype", GLUON_DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", GLUON_SINK_SHAPES, ids=lambda s: "B{}-Nq{}-Nk{}-H{}-HKV{}-D{}".format(*s))
@pytest.mark.parametrize("variant", GLUON)
def test_gluon_sink_matches_reference(variant, shape, causal, dtype):
    """ws / ws_two_pass with a sink (the stock forward's LSE carries it), o, dq, dk, dv and dsink vs the reference."""
    b, nq, nk, h, hkv, d = shape
    q, k, v, do, sink = make_case(b, nq, nk, h, hkv, d, d, dtype=dtype, seed=zlib.crc32(f"{variant}{shape}".encode()))
    check(variant, q, k, v, do, sink, causal)


@needs_hopper
@pytest.mark.parametrize("blocks, causal, options", [
    (dict(deterministic=True), True, {}), (dict(deterministic=True), False, {}), (dict(persistent=True), True, {}),
    ({}, False, dict(window_size=(37, 11))), ({}, True, dict(window_size=(50, 0)))],
    ids=["deterministic-causal", "deterministic-full", "persistent-causal", "window", "causal-window"])
def test_gluon_sink_with_ws_options(blocks, causal, options):
    """ws's own modes with a sink: deterministic (ws_two_pass's dQ kernel), persistent tiles, a sliding window (rows
    whose window holds no key: O = 0, all of the row on the sink). Nq > Nk: causal rows that see no key."""
    q, k, v, do, sink = make_case(2, 230, 190, 4, 2, 64, 64, dtype=torch.bfloat16, seed=23)
    check("ws", q, k, v, do, sink, causal, blocks={**small_blocks("ws"), **blocks}, **options)


# Dv != D on an sm90 GPU (issue 47): (B, Nq, Nk, H, Hkv, D, Dv): DeepSeek's 192 / 128 with tails both ways, GQA and
# Nq != Nk (causal rows that see no key), 128 / 64 and 64 / 128 (V wider than Q); the designs' default blocks
# (those runners.compile_check checks: D192's for 192 / 128)
GLUON_DV_SHAPES = [(2, 200, 333, 4, 2, 192, 128), (1, 333, 200, 4, 1, 192, 128), (1, 130, 257, 2, 2, 128, 64),
                   (2, 77, 91, 4, 2, 64, 128)]


@needs_hopper
@pytest.mark.parametrize("dtype", GLUON_DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", GLUON_DV_SHAPES, ids=lambda s: "B{}-Nq{}-Nk{}-H{}-HKV{}-D{}-Dv{}".format(*s))
@pytest.mark.parametrize("variant", GLUON)
def test_gluon_value_head_dim_matches_reference(variant, shape, causal, dtype):
    """ws / ws_two_pass with V's own head dim: o, dq, dk, dv against the reference (dv [B, Nk, Hkv, Dv])."""
    q, k, v, do, _ = make_case(*shape, dtype=dtype, seed=zlib.crc32(f"dv{variant}{shape}{causal}".encode()))
    check(variant, q, k, v, do, None, causal, blocks={})


# (design, (D, Dv), blocks over the defaults): ws's schedules with Dv != D, each compile-checked for sm90 (docs/ws.md):
# P and dS through shared memory (swap_ab=false: 192 / 128's default), swap AB (128 / 64's and 64 / 128's), one
# partition, the deterministic dQ pass, persistent tiles, prefetched scores, early dV
GLUON_DV_SCHEDULES = [("ws", (192, 128), {}), ("ws", (192, 128), dict(deterministic=True)),
                      ("ws", (192, 128), dict(warp_specialize=False)), ("ws_two_pass", (192, 128), {}),
                      ("ws", (128, 64), dict(swap_ab=False)), ("ws", (128, 64), dict(persistent=True)),
                      ("ws", (64, 128), dict(prefetch_scores=True)), ("ws", (64, 128), dict(early_dv=True,
                                                                                           swap_ab=False))]


@needs_hopper
@pytest.mark.parametrize("variant, dims, blocks", GLUON_DV_SCHEDULES,
                         ids=[f"{v}-D{d}-Dv{dv}-{'-'.join(f'{k}={x}' for k, x in b.items()) or 'default'}"
                              for v, (d, dv), b in GLUON_DV_SCHEDULES])
def test_gluon_value_head_dim_schedules_with_a_sink(variant, dims, blocks):
    """Dv != D with a sink (dsink too), causal, tails, GQA, Nq > Nk (rows that see no key), in each schedule."""
    q, k, v, do, sink = make_case(2, 211, 190, 4, 2, *dims, dtype=torch.bfloat16, seed=31)
    check(variant, q, k, v, do, sink, True, blocks=blocks)


# (D, Dv, blocks): a packed batch at D128 on the small test blocks, and at DeepSeek's 192 / 128 on the defaults
GLUON_PACKED = [pytest.param(128, 128, None, id="D128"), pytest.param(192, 128, {}, id="D192-Dv128")]


@needs_hopper
@pytest.mark.parametrize("head_dim, head_dim_v, blocks", GLUON_PACKED)
@pytest.mark.parametrize("variant", GLUON)
def test_gluon_sink_packed_documents(variant, head_dim, head_dim_v, blocks):
    """A packed batch with a sink (one per head across the documents, an empty one included), with V's own head dim
    at 192 / 128."""
    lens_q, lens_k = [113, 0, 229], [121, 70, 171]
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    q, k, v, do, sink = make_case(1, sum(lens_q), sum(lens_k), 4, 2, head_dim, head_dim_v, dtype=torch.bfloat16,
                                  seed=29 if head_dim == head_dim_v else 37)
    q, k, v, do = (t[0] for t in (q, k, v, do))  # [total, H, D | Dv]
    check(variant, q, k, v, do, sink, True, blocks=blocks, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
