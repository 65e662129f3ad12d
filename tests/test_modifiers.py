"""Score modifiers (issue 24): sliding window, softcap and FLA's forget gate (with dg), against the fp32 reference
and against independent fp64 math; bad arguments; designs without them refuse; windowed loops skip the blocks
outside the band (counted)."""
import math

import pytest
import torch

from tests.test_variants import SMALL_BLOCKS, design, small_blocks
from variants import TritonVariant, attention, get, names
from variants.accuracy import REL_TOL, error
from variants.problem import Problem
from variants.reference import reference_grads

# The designs that implement every modifier in the interpreter; every other Triton design must refuse them.
MODIFIED = [name for name in names() if isinstance(get(name), TritonVariant) and get(name).modifiers]


def make_case(shape, dtype, device, gated, seed):
    """q, k, v, do [B, N, H, D] and a log forget gate g [B, Nq, H] fp32 (log-sigmoid, as FLA's) or None."""
    torch.manual_seed(seed)
    b, nq, nk, h, hkv, d = shape
    q, do = (torch.randn(b, nq, h, d, device=device, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(b, nk, hkv, d, device=device, dtype=dtype) for _ in range(2))
    g = torch.nn.functional.logsigmoid(torch.randn(b, nq, h, device=device) + 2) if gated else None
    return q, k, v, do, g


def skip_unless_implemented(variant, causal, window, softcap, gated, q=None, k=None):
    """Skips a case using a modifier the design does not list (its refusal is test_designs_without_...), or a shape
    or dtype the design does not cover (ws: head dims 64 / 128, fp16 / bf16; its own tests: tests/test_ws.py)."""
    used = {"window": window is not None, "softcap": softcap > 0, "gate": gated}
    missing = [name for name, on in used.items() if on and name not in get(variant).modifiers]
    if missing:
        pytest.skip(f"{variant} does not implement {missing}")
    if q is not None:  # packed [total, H, D]: its dtype and head dim as one sequence
        dense = (q, k) if q.dim() == 4 else (q.unsqueeze(0), k.unsqueeze(0))
        reason = get(variant).problem_reason(Problem.from_tensors(dense[0], dense[1], dense[1], causal))
        if reason:
            pytest.skip(reason)


def check_against_reference(variant, q, k, v, do, g, causal, window, softcap, blocks=None, **packed):
    """attention() forward + backward vs reference_grads with the same modifiers: o, dq, dk, dv (and dg).
    blocks: the design's small test blocks unless given."""
    skip_unless_implemented(variant, causal, window, softcap, g is not None, q, k)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v) + (() if g is None else (g,))]
    o = attention(*leaves[:3], causal=causal, variant=variant, blocks=blocks or small_blocks(variant), window_size=window,
                  softcap=softcap, g=None if g is None else leaves[3], **packed)
    o.backward(do)
    ref = reference_grads(q, k, v, do, causal, window_size=window, softcap=softcap, g=g, **packed)
    for name, out, expected in zip(("o", "dq", "dk", "dv", "dg"), (o, *(t.grad for t in leaves)), ref):
        assert out.shape == expected.shape, name
        err = error(out, expected)
        assert err.ok(q.dtype), f"{variant} {name}: rel err {err.rel:.2e} > {REL_TOL[q.dtype]:.0e}"


# (shape (B, Nq, Nk, H, Hkv, D), causal, window_size, softcap, gated): each modifier alone and combined, odd lengths,
# GQA, Nq != Nk (window, softcap), rows that see no key (causal Nq > Nk).
CASES = [
    ((1, 45, 45, 2, 1, 32), True, (9, 0), 0.0, False),     # causal sliding window, GQA 2:1
    ((1, 37, 50, 2, 2, 16), False, (6, 11), 0.0, False),   # two-sided window, Nq < Nk
    ((1, 50, 37, 4, 1, 16), True, (20, 0), 0.0, False),    # causal window, Nq > Nk (rows that see no key), MQA
    ((1, 40, 29, 2, 2, 16), False, (-1, 3), 0.0, False),   # right side only, Nq > Nk
    ((2, 33, 47, 2, 1, 24), False, None, 5.0, False),      # softcap alone, Nq != Nk
    ((1, 41, 41, 4, 2, 16), True, None, 0.0, True),        # gate alone (dg), GQA
    ((1, 53, 53, 2, 1, 16), True, (12, 0), 2.0, True),     # all three
    ((1, 35, 48, 2, 2, 16), False, (7, 5), 1.5, False),    # window + softcap, Nq != Nk
]


def case_id(case) -> str:
    shape, causal, window, softcap, gated = case
    b, nq, nk, h, hkv, d = shape
    return (f"Nq{nq}-Nk{nk}-H{h}-HKV{hkv}-{'causal' if causal else 'full'}-w{window}-cap{softcap}"
            f"{'-gate' if gated else ''}").replace(" ", "")


@pytest.mark.parametrize("variant", [design(v) for v in MODIFIED])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_modifiers_match_reference(variant, case, device):
    shape, causal, window, softcap, gated = case
    q, k, v, do, g = make_case(shape, torch.float32, device, gated, seed=len(case_id(case)))
    check_against_reference(variant, q, k, v, do, g, causal, window, softcap)


@pytest.mark.parametrize("variant", [design(v) for v in MODIFIED])
def test_modifiers_fp16(variant, device):
    q, k, v, do, g = make_case((1, 47, 47, 2, 1, 32), torch.float16, device, True, seed=1)
    check_against_reference(variant, q, k, v, do, g, True, (10, 0), 3.0)


# Modes of the atomic designs that run other code: the deterministic dQ pass (two_pass's, which writes the gate's
# per-query sums) and atomic_tma's pointer loads instead of tensor descriptors.
OTHER_MODES = [("atomic", dict(deterministic=True)), ("atomic_tma", dict(deterministic=True)),
               ("atomic_tma", dict(tma_load=False))]


@pytest.mark.parametrize("variant, overrides", [design(v, o, id=f"{v}-{'-'.join(o)}") for v, o in OTHER_MODES])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_modifiers_other_modes(variant, overrides, packed, device):
    """Window + softcap + gate through each mode, dense and packed (documents of 13, 0, 27, 5 tokens)."""
    lens = (13, 0, 27, 5)
    q, k, v, do, g = make_case((1, sum(lens), sum(lens), 2, 1, 16), torch.float32, device, True, seed=2)
    extra = {}
    if packed:
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
        q, k, v, do, g = (t[0] for t in (q, k, v, do, g))
        extra = dict(cu_seqlens_q=cu, cu_seqlens_k=cu)
    check_against_reference(variant, q, k, v, do, g, True, (12, 0), 2.0,
                            blocks=dict(small_blocks(variant), **overrides), **extra)


@pytest.mark.parametrize("variant", [design(v) for v in MODIFIED if get(v).supports_varlen])
@pytest.mark.parametrize("causal, window, softcap, gated", [(True, (6, 0), 2.0, True), (False, (4, 2), 0.0, False)],
                         ids=["causal-window-softcap-gate", "full-window"])
def test_modifiers_packed(variant, causal, window, softcap, gated, device):
    """Packed documents (an empty one among them): window, softcap and the gate's cumsum restart per document."""
    lens = (13, 0, 27, 5)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    q, k, v, do, g = make_case((1, sum(lens), sum(lens), 2, 1, 16), torch.float32, device, gated, seed=3)
    q, k, v, do = (t[0] for t in (q, k, v, do))
    check_against_reference(variant, q, k, v, do, None if g is None else g[0], causal, window, softcap,
                            cu_seqlens_q=cu, cu_seqlens_k=cu)


def independent_grads(q, k, v, do, g, causal, window, softcap, scale):
    """fp64 masked softmax written out from the definitions, one head at a time, no code shared with the reference."""
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v) + (() if g is None else (g,))]
    q_, k_, v_ = leaves[:3]
    b, nq, h, _ = q.shape
    nk, hkv = k.shape[1], k.shape[2]
    outs = torch.zeros(b, nq, h, q.shape[-1], dtype=torch.float64)
    for i_b in range(b):
        for i_h in range(h):
            kh = i_h // (h // hkv)
            s = scale * q_[i_b, :, i_h] @ k_[i_b, :, kh].T  # [Nq, Nk]
            s = softcap * torch.tanh(s / softcap) if softcap else s
            if g is not None:
                cum = torch.cumsum(leaves[3][i_b, :, i_h], 0)
                s = s + cum[:, None] - cum[None, :]
            rel = torch.arange(nk)[None, :] - torch.arange(nq)[:, None] - (nk - nq)  # j - (i + Nk - Nq)
            ok = torch.ones_like(rel, dtype=torch.bool)
            if causal:
                ok &= rel <= 0
            if window is not None and window[0] >= 0:
                ok &= rel >= -window[0]
            if window is not None and window[1] >= 0:
                ok &= rel <= window[1]
            p = torch.exp(s - s.masked_fill(~ok, -math.inf).amax(1, keepdim=True)) * ok
            outs[i_b, :, i_h] = (p / p.sum(1, keepdim=True)) @ v_[i_b, :, kh]
    grads = torch.autograd.grad(outs, leaves, do.double())
    return (outs.detach(), *grads)


def test_reference_matches_independent_math():
    """The reference's window, softcap and gate (with dg) against the definitions written out in fp64."""
    q, k, v, do, g = make_case((1, 23, 23, 4, 2, 8), torch.float64, "cpu", True, seed=5)
    for window, softcap in (((4, 0), 0.0), ((-1, -1), 2.5), ((6, 0), 1.0)):
        ref = reference_grads(q, k, v, do, True, 0.4, torch.float64, window_size=window, softcap=softcap, g=g)
        mine = independent_grads(q, k, v, do, g, True, window, softcap, 0.4)
        for name, a, b in zip(("o", "dq", "dk", "dv", "dg"), ref, mine):
            assert torch.allclose(a, b, atol=1e-10, rtol=1e-9), (window, softcap, name)
    # two-sided window and softcap, Nq != Nk, no gate
    q, k, v, do, _ = make_case((1, 19, 26, 2, 2, 8), torch.float64, "cpu", False, seed=6)
    ref = reference_grads(q, k, v, do, False, 0.4, torch.float64, window_size=(3, 5), softcap=4.0)
    mine = independent_grads(q, k, v, do, None, False, (3, 5), 4.0, 0.4)
    for a, b in zip(ref, mine):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("causal, window, empty", [(True, None, 8), (True, (4, 0), 8), (False, (3, 2), 6)],
                         ids=["causal", "causal-window", "full-window"])
def test_reference_propagates_nan_and_zeroes_only_empty_rows(causal, window, empty):
    """One NaN in q (head 1, a row that sees keys) is NaN in that row's o and in dv of its kv head, as every design
    gives; head 0 stays finite, and the first `empty` rows (Nq > Nk: they see no key) output 0 with zero dq.
    Dense, and packed after a 4-token document."""
    q, k, v, do, _ = make_case((1, 20, 12, 2, 1, 8), torch.float32, "cpu", False, seed=7)
    q[0, 15, 1, 3] = float("nan")
    cu_q, cu_k = (torch.tensor([0, 4, 4 + n], dtype=torch.int32) for n in (20, 12))
    packed = [torch.cat([t[0, :4], t[0]]) for t in (q, k, v, do)]
    for grads, rows in ((reference_grads(q, k, v, do, causal, window_size=window), lambda t: t[0]),
                        (reference_grads(*packed, causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, window_size=window),
                         lambda t: t[4:])):
        o, dq, _, dv = (rows(t) for t in grads)
        assert o[15, 1].isnan().all() and dv[..., 0, :].isnan().any(), "the NaN must reach o and dv"
        assert not o[:, 0].isnan().any() and not dq[:, 0].isnan().any(), "head 0 stays finite"
        assert (o[:empty] == 0).all() and (dq[:empty] == 0).all(), "rows that see no key: o = 0, dq = 0"


@pytest.mark.parametrize("kwargs, message", [
    (dict(window_size=(-2, 0)), "window_size entries must be >= -1"),
    (dict(window_size=(3,)), "window_size must be two ints"),
    (dict(softcap=-1.0), "softcap must be >= 0"),
    (dict(g="nq!=nk"), "needs Nq == Nk"),
    (dict(g="shape"), "must have shape"),
    (dict(g="dtype"), "must be fp32"),
    (dict(g="full"), "needs causal=True"),
], ids=["window-2", "window-len", "softcap<0", "gate-nq-nk", "gate-shape", "gate-dtype", "gate-noncausal"])
def test_bad_modifier_arguments(kwargs, message, device):
    q, k, v, _, _ = make_case((1, 8, 8, 2, 1, 16), torch.float32, device, False, seed=0)
    causal = kwargs.get("g") != "full"
    if "g" in kwargs:
        kind = kwargs.pop("g")
        kwargs["g"] = {"shape": torch.zeros(1, 8, 1, device=device),
                       "dtype": torch.zeros(1, 8, 2, dtype=torch.float16, device=device)}.get(
            kind, torch.zeros(1, 8, 2, device=device))
        if kind == "nq!=nk":
            k, v = k[:, :6], v[:, :6]
    with pytest.raises(ValueError, match=message) as info:
        attention(q, k, v, causal=causal, variant="two_pass", **kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("variant, modifier", [(v, m) for v in names() for m in ("window", "softcap", "gate")
                                               if m not in get(v).modifiers])
def test_designs_without_a_modifier_refuse_it(variant, modifier):
    """Never silently ignored: the reason names the modifier (SDPA baselines, ws, designs not wired yet)."""
    problem = Problem(1, 64, 64, 2, 2, 64, True, torch.float16, "cuda").with_modifiers(
        window_size=(16, 0) if modifier == "window" else None, softcap=30.0 if modifier == "softcap" else 0.0,
        gate=modifier == "gate")
    reason = get(variant).supports(problem)
    assert reason is not None and modifier in reason, (variant, reason)
    assert get(variant).problem_reason(problem) is not None


def test_default_problem_has_no_modifiers():
    problem = Problem(1, 64, 64, 2, 2, 64, True, torch.float16, "cuda")
    assert problem.modifiers == () and not problem.mods.active
    assert problem.with_modifiers(window_size=(-1, -1)).modifiers == ()  # causal, unbounded: plain causal
    assert problem.with_modifiers(window_size=(-1, 5)) == problem  # causal sets right = 0: no window left


def blocks_with_visible_pairs(rows: int, cols: int, block_r: int, block_c: int, visible) -> int:
    """Block pairs (resident block of rows, walked block of cols) holding at least one visible pair: what a loop that
    skips every fully-masked block walks. visible(i, j) on index tensors (rows may be queries or keys)."""
    i = torch.arange(rows)[:, None]
    j = torch.arange(cols)[None, :]
    seen = visible(i, j)  # [rows, cols]
    per_block = seen.reshape(rows // block_r, block_r, cols // block_c, block_c).any(3).any(1)
    return int(per_block.sum())


# Blocks of 16 everywhere and no diagonal slices, so that one step call is one (block, block) pair, and the step
# functions counted: "dq" walks key blocks for a resident query block, "dkdv" query blocks for a resident key block.
SHARED_STEPS = {"dq": ("kernels.dq_steps", "dq_step"), "dkdv": ("kernels.dkdv_steps", "dkdv_step")}
COUNTED = {
    "two_pass": (dict(BLOCK_M1=16, BLOCK_N1=16, BLOCK_M2=16, BLOCK_N2=16, num_stages1=1, num_stages2=1), SHARED_STEPS),
    "fused": (dict(BLOCK_M1=16, BLOCK_N1=16, BLOCK_M2=16, BLOCK_N2=16, BLK_SLICE_FACTOR=1, num_stages=1), SHARED_STEPS),
    "atomic_tma": (dict(BLOCK_M=16, BLOCK_N=16, num_stages=1), {"dkdv": ("kernels.atomic_tma", "_dkdv_dq_step")}),
}


@pytest.mark.parametrize("variant", list(COUNTED))
@pytest.mark.parametrize("causal, window, nq, nk", [(True, (8, 0), 64, 64), (False, (5, 20), 48, 80),
                                                    (True, (16, 0), 80, 48)], ids=["causal", "two-sided", "nq>nk"])
def test_windowed_loops_walk_only_the_band(monkeypatch, variant, causal, window, nq, nk, device):
    """A design with a window: the dQ loop runs one step per (query block, key block) pair with a visible pair, and
    the dK/dV loop one per (key block, query block) pair: fully-masked blocks are skipped, not masked (counted calls
    of the design's step functions, COUNTED, in the interpreter)."""
    if device != "cpu":
        pytest.skip("counts the interpreter's calls of the step functions")
    import importlib
    blocks, steps = COUNTED[variant]
    calls = dict.fromkeys(steps, 0)

    def counted(name, real):
        def step(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return step

    for name, (module, function) in steps.items():
        module = importlib.import_module(module)
        monkeypatch.setattr(module, function, counted(name, getattr(module, function)))
    block = 16
    q, k, v, do, _ = make_case((1, nq, nk, 1, 1, 16), torch.float32, device, False, seed=7)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    attention(*leaves, causal=causal, variant=variant, blocks=blocks, window_size=window).backward(do)
    left, right = window
    right = 0 if causal else right

    def visible(i, j):  # query i, key j
        diagonal = i + nk - nq
        return (j >= diagonal - left) & (j <= diagonal + right)

    want_dq = blocks_with_visible_pairs(nq, nk, block, block, visible)
    want_dkdv = blocks_with_visible_pairs(nk, nq, block, block, lambda kj, qi: visible(qi, kj))
    assert calls == {name: want for name, want in (("dq", want_dq), ("dkdv", want_dkdv)) if name in steps}
    full = (nq // block) * (nk // block)
    assert want_dq < full and want_dkdv < full, "the case must make skipping visible"


@pytest.mark.parametrize("variant", [design(v) for v in MODIFIED if "gate" in get(v).modifiers])
def test_dg_does_not_drift_along_a_long_gated_sequence(variant, device):
    """dg is a reverse cumsum of (per-query sums of dS - per-key sums) over the whole sequence: both halves must come
    from the same dS, or delta's rounding (from the rounded O) adds up along N (kernels/gate.py). At N = 512 fp16 a
    design that leaves out the query half, or rounds the scores two ways (prescale), is 16x off the others
    (rel_dg 6.4e-3 vs 4e-4); at N = 16k bf16 it failed the runner's gate (results/h100/modifiers). Default blocks."""
    torch.manual_seed(0)
    q, k, v, do, g = make_case((1, 512, 512, 1, 1, 32), torch.float16, device, True, seed=0)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, g)]
    attention(*leaves[:3], causal=True, variant=variant, g=leaves[3]).backward(do)
    dg_ref = reference_grads(q, k, v, do, True, g=g)[4]
    assert error(leaves[3].grad, dg_ref).rel < 2e-3


@pytest.mark.parametrize("variant", [v for v in MODIFIED if "prescale" in get(v).Blocks.__dataclass_fields__])
def test_prescale_is_off_for_a_gate(variant, device):
    """The defaults of a gated problem turn prescale off; asking for it with a gate is one clear line."""
    problem = Problem(1, 64, 64, 2, 2, 16, True, torch.float16, device).with_modifiers(gate=True)
    assert not get(variant).make_blocks(problem).prescale
    q, k, v, do, g = make_case((1, 64, 64, 2, 2, 16), torch.float16, device, True, seed=1)
    with pytest.raises(ValueError, match="prescale=true cannot run with the forget gate") as err:
        o = attention(q.requires_grad_(), k, v, causal=True, variant=variant, blocks={"prescale": True}, g=g)
        o.backward(do)
    assert "\n" not in str(err.value)
