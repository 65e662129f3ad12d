"""Every Triton backward variant against the fp32 reference: o, dq, dk, dv, on odd shapes."""
import pytest
import torch

from dataclasses import fields

from variants import Problem, TritonVariant, attention, get, names
from variants.accuracy import REL_TOL, error
from variants.base import interpreter_on
from variants.reference import reference_grads

# Every registered Triton design (the registry, as runners.tables.TRITON_VARIANTS): a new design is in the matrix
# with no edit here but its SMALL_BLOCKS entry. One with `runs_in_interpreter = False` is skipped on the CPU.
TRITON_VARIANTS = [name for name in names() if isinstance(get(name), TritonVariant)]
ON_GPU = torch.cuda.is_available()


def skipped_here(variant: str) -> str | None:
    """Why the design cannot run in this process (the CPU interpreter and a design that opts out), or None."""
    if interpreter_on() and not get(variant).runs_in_interpreter:
        return f"{variant} cannot run in the Triton interpreter (runs_in_interpreter = False)"
    return None


def design(variant: str, *values, id: str | None = None, marks=()):
    """pytest.param(variant, *values) of a design, skipped where it cannot run (`skipped_here`)."""
    reason = skipped_here(variant)
    marks = (*(marks if isinstance(marks, (tuple, list)) else (marks,)), *([pytest.mark.skip(reason=reason)] if reason else []))
    return pytest.param(variant, *values, id=variant if id is None else id, marks=marks)


def designs(variants=None) -> list:
    """The designs (default: all) as pytest params; see `design`."""
    return [design(v) for v in (TRITON_VARIANTS if variants is None else variants)]


def with_field(field: str) -> list[str]:
    """The designs whose Blocks dataclass has `field` (e.g. longest_first)."""
    return [v for v in TRITON_VARIANTS if field in {f.name for f in fields(get(v).Blocks)}]

# Small blocks so that even N = 17 spans several blocks and partial tails in the interpreter.
SMALL_BLOCKS = {
    "two_pass": dict(BLOCK_M1=16, BLOCK_N1=32, BLOCK_M2=32, BLOCK_N2=16, num_stages1=1, num_stages2=1),
    "atomic": dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1),
    "atomic_tma": dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1),
    "fused": dict(BLOCK_M1=32, BLOCK_N1=16, BLOCK_M2=16, BLOCK_N2=32, BLK_SLICE_FACTOR=2, num_warps=4, num_stages=1),
    "ws": dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),  # its smallest legal tiles (WsBlocks.check_rules)
}


def small_blocks(variant: str) -> dict:
    """SMALL_BLOCKS[variant], else the design's own `test_blocks` (a design added as two files declares them in its
    variant file); a design with neither fails (never silently skipped)."""
    if variant in SMALL_BLOCKS:
        return SMALL_BLOCKS[variant]
    declared = getattr(get(variant), "test_blocks", None) if variant in names() else None
    if declared is None:
        pytest.fail(f"design {variant!r} has no SMALL_BLOCKS entry in tests/test_variants.py and no test_blocks on its "
                    f"variant class: add its small blocks (so that short lengths span several blocks and partial "
                    f"tails)", pytrace=False)
    return dict(declared)


def skip_unless_supported(variant: str, shape, causal: bool, dtype, device) -> None:
    """Skips a matrix case that a hardware-specific design's own `supports()` refuses (ws: fp16/bf16, D 64/128, sm90).
    A design that runs in the interpreter serves every case: a refusal fails (test_interpreter_designs_support...)."""
    reason = get(variant).supports(Problem(*shape, causal, dtype, device))
    if reason is not None:
        assert not get(variant).runs_in_interpreter, f"{variant} refuses a case of the shared matrix: {reason}"
        pytest.skip(f"{variant} refuses this problem: {reason}")

# (B, Nq, Nk, H, Hkv, D): single tokens, tails, Nq < Nk, Nq > Nk (rows that see no key when causal),
# GQA 2:1 and 4:1, MQA, non-power-of-two head dims.
SHAPES = [
    (1, 1, 1, 1, 1, 16),
    (2, 17, 17, 2, 2, 32),
    (1, 63, 100, 4, 2, 80),
    (1, 100, 63, 4, 1, 40),
    (1, 130, 130, 4, 1, 72),
    (2, 64, 48, 2, 2, 96),
    (1, 64, 128, 2, 1, 64),  # every length a multiple of every block: the unmasked fast paths
    (1, 96, 64, 2, 2, 32),  # multiples of the blocks, causal diagonal not block-aligned
]
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if ON_GPU else [])  # interpreter bf16 dots are wrong


def shape_id(shape, causal):
    b, nq, nk, h, hkv, d = shape
    return f"B{b}-Nq{nq}-Nk{nk}-H{h}-HKV{hkv}-D{d}-{'causal' if causal else 'full'}"


def dtype_id(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# The fast tier (`pytest -m "not slow"`: a GPU check in minutes from a cold Triton cache, docs/testing.md). Every
# (head dim, causal, dtype, blocks) compiles its own kernels (seconds each on a GPU), so it keeps two cases per
# variant that together cover odd lengths, GQA 2:1 and MQA, Nq < Nk and Nq > Nk (rows that see no key), causal and
# full, head dims 80 and 40, fp16 and bf16 (fp32 on the CPU). The rest of the matrix is `slow`; CI runs it all.
FAST_CASES = {((1, 63, 100, 4, 2, 80), True, torch.float16),
              ((1, 100, 63, 4, 1, 40), False, torch.bfloat16 if ON_GPU else torch.float32)}
CASES = [design(variant, shape, causal, dtype, id=f"{variant}-{shape_id(shape, causal)}-{dtype_id(dtype)}",
                marks=() if (shape, causal, dtype) in FAST_CASES else pytest.mark.slow)
         for variant in TRITON_VARIANTS for shape in SHAPES for causal in (False, True) for dtype in DTYPES]


def make_inputs(shape, dtype, device, layout="bnhd"):
    """Fresh random q, k, v, do in [B, N, H, D] order (views of [B, H, N, D] storage for bhnd)."""
    b, nq, nk, h, hkv, d = shape
    if layout == "bhnd":
        q, do = (torch.randn(b, h, nq, d, device=device, dtype=dtype).transpose(1, 2) for _ in range(2))
        k, v = (torch.randn(b, hkv, nk, d, device=device, dtype=dtype).transpose(1, 2) for _ in range(2))
    else:
        q, do = (torch.randn(b, nq, h, d, device=device, dtype=dtype) for _ in range(2))
        k, v = (torch.randn(b, nk, hkv, d, device=device, dtype=dtype) for _ in range(2))
    return q, k, v, do


def run_and_check(variant, q, k, v, do, causal, blocks=None, scale=None, layout="bnhd"):
    """Forward + backward through `variant`; asserts o, dq, dk, dv match the reference."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    if layout == "bhnd":  # hand the kernels [B, H, N, D] tensors
        args = [t.transpose(1, 2) for t in leaves]
        o = attention(*args, causal=causal, scale=scale, variant=variant, blocks=blocks, layout="bhnd").transpose(1, 2)
    else:
        o = attention(*leaves, causal=causal, scale=scale, variant=variant, blocks=blocks)
    o.backward(do)
    ref = reference_grads(q, k, v, do, causal, scale)
    for name, out, expected in zip(("o", "dq", "dk", "dv"), (o, *(t.grad for t in leaves)), ref):
        assert out.shape == expected.shape, name
        err = error(out, expected)
        assert err.ok(q.dtype), f"{variant} {name}: rel err {err.rel:.2e} > {REL_TOL[q.dtype]:.0e} (max abs {err.max_abs:.2e})"
    return leaves


@pytest.mark.parametrize("variant, shape, causal, dtype", CASES)
def test_matches_reference(variant, shape, causal, dtype, device):
    skip_unless_supported(variant, shape, causal, dtype, device)
    torch.manual_seed(hash((variant, shape, causal)) % 2**31)
    run_and_check(variant, *make_inputs(shape, dtype, device), causal, blocks=small_blocks(variant))


@pytest.mark.parametrize("variant", designs())
def test_default_blocks(variant, device):
    """The per-problem defaults (the blocks users get) on a tail-heavy shape."""
    skip_unless_supported(variant, (1, 77, 150, 2, 1, 64), True, torch.float16, device)
    run_and_check(variant, *make_inputs((1, 77, 150, 2, 1, 64), torch.float16, device), causal=True)


@pytest.mark.slow
@pytest.mark.parametrize("variant", designs())
def test_bhnd_layout_and_explicit_scale(variant, device):
    skip_unless_supported(variant, (2, 33, 47, 4, 2, 48), True, torch.float32, device)
    run_and_check(variant, *make_inputs((2, 33, 47, 4, 2, 48), torch.float32, device, layout="bhnd"),
                  causal=True, blocks=small_blocks(variant), scale=0.3, layout="bhnd")


@pytest.mark.slow
@pytest.mark.parametrize("variant", designs())
def test_extreme_head_dims(variant, device):
    for head_dim in (8, 256):
        skip_unless_supported(variant, (1, 20, 36, 2, 1, head_dim), True, torch.float32, device)
        run_and_check(variant, *make_inputs((1, 20, 36, 2, 1, head_dim), torch.float32, device), causal=True,
                      blocks=small_blocks(variant))


@pytest.mark.parametrize("variant", TRITON_VARIANTS)
def test_every_design_has_small_blocks(variant):
    """Every registered design has SMALL_BLOCKS (also those the interpreter skips), and they are valid blocks."""
    get(variant).Blocks.from_dict(small_blocks(variant))


def test_interpreter_designs_support_the_whole_matrix(device):
    """A design that runs in the interpreter is never skipped by `skip_unless_supported`: it serves every case."""
    for variant in TRITON_VARIANTS:
        if get(variant).runs_in_interpreter:
            for case in CASES:
                if case.values[0] == variant:
                    _, shape, causal, dtype = case.values
                    assert get(variant).supports(Problem(*shape, causal, dtype, device)) is None, case.id


def test_matrix_is_every_registered_design():
    from runners.tables import TRITON_VARIANTS as FROM_TABLES
    assert sorted(TRITON_VARIANTS) == sorted(FROM_TABLES)
    assert {"two_pass", "atomic", "fused", "atomic_tma"} <= set(TRITON_VARIANTS)
    assert {case.values[0] for case in CASES} == set(TRITON_VARIANTS)


@pytest.mark.slow
def test_gradients_come_back_in_input_layout(device):
    q, k, v, do = make_inputs((1, 20, 20, 2, 2, 16), torch.float32, device, layout="bhnd")
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    attention(*leaves, variant="two_pass", blocks=SMALL_BLOCKS["two_pass"]).backward(do)
    for leaf in leaves:
        assert leaf.grad.stride() == leaf.stride()


@pytest.mark.slow
@pytest.mark.parametrize("variant", designs(with_field("longest_first")))
@pytest.mark.parametrize("shape", [(1, 63, 100, 4, 2, 80), (2, 100, 63, 2, 1, 32)], ids=lambda s: shape_id(s, True))
def test_longest_first_grid(variant, shape, device):
    """The swapped (heads, blocks) grid visits every block exactly once, in reverse for dQ."""
    skip_unless_supported(variant, shape, True, torch.float32, device)
    run_and_check(variant, *make_inputs(shape, torch.float32, device), True,
                  blocks={**small_blocks(variant), "longest_first": True})


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_two_pass_prescale(causal, device):
    run_and_check("two_pass", *make_inputs((1, 63, 100, 4, 2, 80), torch.float32, device), causal,
                  blocks={**SMALL_BLOCKS["two_pass"], "prescale": True})


@pytest.mark.slow  # the fast GPU tier stays under 3 minutes cold (docs/testing.md); the switches are slow-tier
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape,dtype", [
    pytest.param((1, 63, 100, 4, 2, 80), torch.float16, id="gqa-nq<nk-D80-fp16"),
    pytest.param((2, 100, 63, 2, 1, 40), torch.float32, id="mqa-nq>nk-D40-fp32"),
])
def test_two_pass_split_dkdv(shape, dtype, causal, device):
    """The dK/dV kernel as a dV pass and a dK pass: each stores only its own gradient (outputs NaN-poisoned)."""
    run_and_check("two_pass", *make_inputs(shape, dtype, device), causal,
                  blocks={**SMALL_BLOCKS["two_pass"], "split_dkdv": True})


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape,dtype,blocks", [
    pytest.param((1, 63, 100, 4, 2, 80), torch.float16, {}, id="gqa-nq<nk-D80=64+16-fp16"),
    pytest.param((2, 100, 63, 2, 1, 40), torch.float32, {"prescale": True}, id="mqa-nq>nk-D40=32+16-prescale-fp32"),
    pytest.param((1, 130, 130, 4, 1, 96), torch.float32, {"split_dkdv": True}, id="D96=64+32-split-dkdv-fp32"),
])
def test_two_pass_split_head_dim(shape, dtype, blocks, causal, device):
    """A head dim that is not a power of two as two register blocks (the second one masked where it overhangs)."""
    run_and_check("two_pass", *make_inputs(shape, dtype, device), causal,
                  blocks={**SMALL_BLOCKS["two_pass"], "split_d": True, **blocks})


def test_head_chunks():
    from kernels.common import head_chunks
    assert [head_chunks(d, True) for d in (192, 96, 80, 40, 72, 128, 200, 16, 8)] == [
        (128, 64), (64, 32), (64, 16), (32, 16), (64, 16), (128, 0), (256, 0), (16, 0), (16, 0)]
    assert head_chunks(192, False) == (256, 0)


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", [160, 192, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_two_pass_large_head_dim_defaults(head_dim, causal, device):
    """The default blocks users get above D=128 (split_dkdv, BLOCK_N1=128, split_d), on lengths off every block."""
    dtype = torch.bfloat16 if ON_GPU else torch.float16
    run_and_check("two_pass", *make_inputs((1, 150, 133, 2, 1, head_dim), dtype, device), causal)


def test_splits_refuse_the_atomic_dq():
    from kernels.dkdv_dq import launch_dkdv
    t = torch.zeros(1, 16, 1, 48)
    with pytest.raises(ValueError, match="split cannot be combined with accumulate_dq"):
        launch_dkdv(t, t, t, t, t, t, t, t, t, causal=False, scale=1.0, accumulate_dq=True,
                    BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1, split=True)
    with pytest.raises(ValueError, match="split_d cannot be combined with accumulate_dq"):
        launch_dkdv(t, t, t, t, t, t, t, t, t, causal=False, scale=1.0, accumulate_dq=True,
                    BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1, split_d=True)


@pytest.mark.slow
def test_atomic_deterministic_mode_is_correct(device):
    blocks = {**SMALL_BLOCKS["atomic"], "deterministic": True}
    run_and_check("atomic", *make_inputs((1, 63, 100, 4, 2, 80), torch.float32, device), True, blocks=blocks)


@pytest.mark.skipif(not ON_GPU, reason="atomics only race on a GPU")
def test_atomic_deterministic_is_bitwise_reproducible(device):
    q, k, v, do = make_inputs((2, 1024, 1024, 8, 2, 64), torch.bfloat16, device)
    variant = get("atomic")
    from variants.problem import Problem
    blocks = variant.make_blocks(Problem.from_tensors(q, k, v, True), {"deterministic": True})
    run = variant.prepare(q, k, v, do, True, 0.125, blocks)
    first = [g.clone() for g in run()]
    for _ in range(3):
        for a, b in zip(first, run()):
            assert torch.equal(a, b)
    for name, out, expected in zip(("dq", "dk", "dv"), first, reference_grads(q, k, v, do, True, 0.125)[1:]):
        assert error(out, expected).ok(q.dtype), f"deterministic atomic {name} is reproducible but wrong"


def test_poisoning_is_active():
    """The NaN poisoning the other tests rely on is really on."""
    assert torch.isnan(torch.empty(4)).all() and torch.isnan(torch.empty_like(torch.ones(3))).all()
