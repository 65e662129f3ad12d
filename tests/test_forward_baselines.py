"""Baseline forwards as choices of `forward=` (issue 42, item 2; kernels/forward_baselines.py): the conversion of
a natural-log LSE into the backward's base-2 convention against the fp32 reference LSE on any machine, the reasons a
call runs the stock forward instead, and the registry-derived choices; on an sm90 GPU the real ops (SDPA's flash
and cuDNN forwards, FlashAttention-4's where installed) against the fp32 reference and under a design's backward."""
import math
from pathlib import Path

import pytest
import torch

from kernels import forward_baselines as FB
from kernels.forward_choice import DEFAULT_FORWARD, FORWARDS, check_forward, chosen_forward, run_forward
from runners.point import timed
from variants.reference import visible_pairs

REPO = Path(__file__).resolve().parents[1]
ON_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
BASELINES = tuple(FB.BASELINE_FORWARDS)


def natural_forward(q, k, v, causal: bool, scale: float, empty_lse: float):
    """What SDPA / FA4 return, in fp32: (o [B, H, Nq, Dv] with NaN in a row that sees no key, natural-log LSE
    [B, H, Nq, 1] with `empty_lse` there). q [B, Nq, H, D], k/v [B, Nk, Hkv, D / Dv]."""
    group = q.shape[2] // k.shape[2]
    q_, k_, v_ = (t.float().transpose(1, 2) for t in (q, k, v))  # [B, H(kv), N, D]
    k_, v_ = (t.repeat_interleave(group, dim=1) for t in (k_, v_))  # [B, H, Nk, D]
    scores = q_ @ k_.transpose(-1, -2) * scale  # [B, H, Nq, Nk]
    visible = visible_pairs(q.shape[1], k.shape[1], causal, None, q.device)
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [B, H, Nq], -inf where no key
    o = torch.softmax(scores, dim=-1) @ v_  # [B, H, Nq, Dv], NaN where no key
    return o, lse.masked_fill(torch.isinf(lse), empty_lse).unsqueeze(-1)


# (batch, Nq, Nk, heads, kv_heads, D, Dv, causal): GQA, Dv != D, Nq > Nk causal (rows with no key)
CONVERSION_CASES = [(2, 17, 17, 2, 2, 16, 16, False), (1, 33, 20, 4, 2, 16, 16, True),
                    (2, 9, 40, 4, 1, 24, 8, True), (1, 12, 12, 2, 2, 16, 8, False)]


@pytest.mark.parametrize("case", CONVERSION_CASES)
@pytest.mark.parametrize("empty_lse", [float("inf"), float("-inf")], ids=["fa2_inf", "fa4_neg_inf"])
def test_conversion_matches_the_reference_lse(case, empty_lse):
    """The natural-log LSE times log2 e, in [B, H, Nq], is runners.point.timed's reference LSE; a row that sees no
    key gets +inf and O = 0 whichever infinity (and whatever O) the op wrote; o comes back [B, Nq, H, Dv] dense."""
    batch, seq_q, seq_k, heads, kv_heads, head_dim, value_dim, causal = case
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, seq_q, heads, head_dim, generator=gen)
    k = torch.randn(batch, seq_k, kv_heads, head_dim, generator=gen)
    v = torch.randn(batch, seq_k, kv_heads, value_dim, generator=gen)
    o_ln, lse_ln = natural_forward(q, k, v, causal, 0.3, empty_lse)
    o, lse = FB.to_backward_lse(o_ln, lse_ln, heads_first=True)
    ref_o, ref_lse = timed.reference_o_lse(q, k, v, causal, 0.3)
    assert o.shape == ref_o.shape and o.is_contiguous() and lse.shape == (batch, heads, seq_q)
    assert lse.dtype == torch.float32 and torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    assert (lse[torch.isinf(lse)] > 0).all()
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse[finite], ref_lse[finite], atol=1e-5)
    assert torch.allclose(o, ref_o, atol=1e-5)  # O = 0 in the rows with no key (NaN before)
    cols = timed.check_forward(o, lse, q, k, v, causal, 0.3, torch.float32)
    assert cols["correct"], cols["_wrong_reason"]


def test_conversion_takes_bnhd_outputs_and_can_leave_o_alone():
    """FA4's o is [B, Nq, H, Dv] already (heads_first=False); zero_empty=False skips the pass over O (a forward
    whose every row sees a key)."""
    q = torch.randn(1, 6, 2, 8)
    o_bnhd = torch.randn(1, 6, 2, 8)
    lse_ln = torch.randn(1, 2, 6)
    o, lse = FB.to_backward_lse(o_bnhd, lse_ln, heads_first=False)
    assert torch.equal(o, o_bnhd) and torch.allclose(lse, lse_ln / math.log(2.0))
    lse_ln[0, 1, 3] = float("-inf")
    o, lse = FB.to_backward_lse(o_bnhd, lse_ln, heads_first=False, zero_empty=False)
    assert torch.equal(o, o_bnhd) and lse[0, 1, 3] == float("inf")
    assert FB.rows_may_be_empty(q, q[:, :4], True) and not FB.rows_may_be_empty(q, q[:, :4], False)
    assert not FB.rows_may_be_empty(q, q, True)


def test_the_choices_are_the_registry_and_auto_is_the_default():
    import variants
    assert FORWARDS == ("stock", "gluon", "auto", *FB.BASELINE_FORWARDS)
    assert set(BASELINES) == {"sdpa_flash", "sdpa_cudnn", "fa4"} and DEFAULT_FORWARD == "auto"
    for name in variants.names():
        impl = variants.get(name)
        if isinstance(impl, variants.TritonVariant):
            assert impl.default_forward == DEFAULT_FORWARD, name
    with pytest.raises(ValueError, match="forward='fast': one of " + ", ".join(FORWARDS)):
        check_forward("fast")


def test_every_choice_is_documented():
    """conf/config.yaml's comment on `forward` and docs/forward.md's table name every choice (the lists there are
    prose, so this test keeps them in step with FORWARDS)."""
    comment = next(line for line in (REPO / "conf" / "config.yaml").read_text().splitlines()
                   if line.startswith("forward:"))
    table = (REPO / "docs" / "forward.md").read_text()
    for name in FORWARDS:
        assert name in comment, name
        assert f"| `{name}`" in table, name
    assert "design's default (auto)" in comment


@pytest.mark.parametrize("name", BASELINES)
def test_a_cpu_tensor_runs_the_stock_forward(name):
    q = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    assert chosen_forward(name, q, q, q, True) == ("stock", f"the {name} forward needs a CUDA tensor; this is a cpu "
                                                            "tensor")


@pytest.mark.parametrize("name", BASELINES)
@pytest.mark.parametrize("extra, reason", [({"varlen": object()}, "packed documents"), ({"gate": object()}, "gate"),
                                           ({"sink": torch.zeros(2)}, "sink")])
def test_what_no_baseline_forward_is_wired_for(name, extra, reason):
    q = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    run = chosen_forward(name, q, q, q, False, **extra)
    assert run.name == "stock" and reason in run.reason and name in run.reason


@pytest.fixture
def on_cuda(monkeypatch):
    """The checks past the common ones (device, packed documents, gate, sink), on CPU tensors."""
    monkeypatch.setattr(FB, "common_reason", lambda *args, **kwargs: None)


class Mods:
    active = True


@pytest.mark.parametrize("name, shapes, causal, dtype, extra, reason", [
    ("sdpa_flash", ((8, 2, 64), (9, 2, 64), (9, 2, 64)), True, torch.bfloat16, {}, "top-left aligned"),
    ("sdpa_cudnn", ((8, 2, 64), (9, 2, 64), (9, 2, 64)), True, torch.bfloat16, {}, "top-left aligned"),
    ("sdpa_flash", ((8, 2, 64),) * 3, False, torch.float32, {}, "fp16 and bf16"),
    ("sdpa_cudnn", ((8, 2, 64),) * 3, False, torch.float32, {}, "fp16 and bf16"),
    ("sdpa_flash", ((8, 2, 64),) * 3, False, torch.bfloat16, {"mods": Mods()}, "window or softcap"),
    ("sdpa_flash", ((8, 2, 64), (8, 2, 64), (8, 2, 32)), False, torch.bfloat16, {}, "V's head dim"),
    ("sdpa_cudnn", ((8, 4, 64), (8, 2, 64), (8, 2, 64)), False, torch.bfloat16, {}, "no GQA"),
    ("sdpa_flash", ((8, 2, 60),) * 3, False, torch.bfloat16, {}, "multiples of 8"),
    ("sdpa_cudnn", ((8, 2, 512),) * 3, False, torch.bfloat16, {}, "up to 256"),
])
def test_sdpa_forwards_refuse_what_they_cannot_do(on_cuda, name, shapes, causal, dtype, extra, reason):
    q, k, v = (torch.zeros(1, *s, dtype=dtype) for s in shapes)
    run = chosen_forward(name, q, k, v, causal, **extra)
    assert run.name == "stock" and reason in run.reason, run


@pytest.mark.parametrize("name, shapes, causal", [
    ("sdpa_flash", ((8, 4, 64), (8, 2, 64), (8, 2, 64)), True),  # GQA: FlashAttention-2 takes it
    ("sdpa_cudnn", ((8, 2, 192), (8, 2, 192), (8, 2, 128)), True),  # MLA's Dv != D: cuDNN takes it
])
def test_sdpa_forwards_take_what_they_can(on_cuda, name, shapes, causal):
    q, k, v = (torch.zeros(1, *s, dtype=torch.float16) for s in shapes)
    assert chosen_forward(name, q, k, v, causal) == (name, "")


def test_cpu_rows_of_a_baseline_forward_run_stock_and_say_why(tmp_path):
    """forward=sdpa_cudnn on the CPU interpreter: a forward row runs the stock forward, records the choice, what ran
    and why, and keys the choice; a backward row keeps the key of the default forward's row."""
    from runners.point import env, schema
    if not env.interpreting():
        pytest.skip("runner rows here are for the CPU interpreter")
    from tests.test_timed_rows import TWO_PASS, cfg_for, measured
    r = measured(tmp_path, *TWO_PASS, "timed=forward", "forward=sdpa_cudnn", "dtype=fp32")
    assert (r.status, bool(r.correct), r.forward, r.forward_ran) == ("ok", True, "sdpa_cudnn", "stock"), r.reason
    assert "needs a CUDA tensor" in r.forward_reason and r.config_key.endswith("|fwd=sdpa_cudnn|timed=forward")
    named = schema.check(cfg_for(tmp_path, *TWO_PASS, "forward=sdpa_cudnn"), "cpu")
    default = schema.check(cfg_for(tmp_path, *TWO_PASS), "cpu")
    assert (named.forward, default.forward) == ("sdpa_cudnn", "auto")
    assert named.config_key("wall_clock") == default.config_key("wall_clock")


# ---- on an sm90 GPU: the real ops ---------------------------------------------------------------------------------

# (batch, Nq, Nk, heads, kv_heads, D, Dv, causal): each runs where its forward takes it, else the test says why
GPU_CASES = [
    (2, 128, 128, 2, 2, 64, 64, False),
    (2, 127, 127, 4, 2, 64, 64, True),  # GQA: sdpa_cudnn refuses
    (3, 200, 333, 4, 4, 128, 128, False),
    (2, 513, 513, 2, 2, 128, 128, True),
    (1, 300, 200, 4, 1, 64, 64, True),  # Nq > Nk causal: rows with no key (fa4); SDPA refuses (top-left)
    (1, 190, 190, 2, 2, 96, 96, True),
    (1, 130, 70, 2, 1, 192, 192, False),
    (1, 200, 200, 2, 2, 256, 256, True),
    (2, 128, 160, 2, 2, 192, 128, False),  # MLA's Dv != D: sdpa_flash refuses
]


def gpu_inputs(case, dtype):
    batch, seq_q, seq_k, heads, kv_heads, head_dim, value_dim, causal = case
    q = torch.randn(batch, seq_q, heads, head_dim, device="cuda", dtype=dtype)
    k = torch.randn(batch, seq_k, kv_heads, head_dim, device="cuda", dtype=dtype)
    v = torch.randn(batch, seq_k, kv_heads, value_dim, device="cuda", dtype=dtype)
    return q, k, v, causal


@pytest.mark.skipif(not ON_HOPPER, reason="the baseline forwards are checked on an sm90 GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "B{}-Nq{}-Nk{}-H{}-HKV{}-D{}-Dv{}-{}".format(
    *c[:7], "causal" if c[7] else "full"))
@pytest.mark.parametrize("name", BASELINES)
def test_matches_the_fp32_reference(name, case, dtype):
    """O and the base-2 LSE of the real op, through run_forward, against runners.point.timed's fp32 reference (the
    row gate: rel_o by dtype, rel_lse 1e-3, +inf where a row sees no key)."""
    q, k, v, causal = gpu_inputs(case, dtype)
    scale = q.shape[-1] ** -0.5
    run = chosen_forward(name, q, k, v, causal)
    if run.name != name:
        pytest.skip(run.reason)
    o, lse = run_forward(name, q, k, v, causal, scale)
    assert o.shape == (*q.shape[:3], v.shape[-1]) and o.dtype == q.dtype and o.is_contiguous()
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    cols = timed.check_forward(o, lse, q, k, v, causal, scale, dtype)
    assert cols["correct"], cols["_wrong_reason"]


@pytest.mark.skipif(not ON_HOPPER, reason="the baseline forwards are checked on an sm90 GPU")
@pytest.mark.parametrize("name", ["sdpa_flash", "sdpa_cudnn"])
def test_sdpa_forwards_run_on_hopper(name):
    """SDPA's two fused forwards are in every CUDA torch: on an H100 / H200 they run (not a silent fallback)."""
    q, k, v, causal = gpu_inputs((2, 256, 256, 2, 2, 128, 128, True), torch.bfloat16)
    assert chosen_forward(name, q, k, v, causal) == (name, "")


@pytest.mark.skipif(not ON_HOPPER, reason="the baseline forwards are checked on an sm90 GPU")
@pytest.mark.parametrize("variant", ["ws", "two_pass"])
@pytest.mark.parametrize("name", BASELINES)
def test_a_backward_reads_a_baseline_forward(name, variant):
    """prepare(..., forward=name): the design's gradients from the baseline forward's O and LSE pass the runner's
    accuracy gate."""
    from runners.point.measure import check_accuracy
    from variants import get
    from variants.problem import Problem
    q, k, v, causal = gpu_inputs((2, 256, 256, 4, 4, 128, 128, True), torch.bfloat16)
    run = chosen_forward(name, q, k, v, causal)
    if run.name != name:
        pytest.skip(run.reason)
    do = torch.randn_like(q)
    impl = get(variant)
    blocks = impl.make_blocks(Problem(2, 256, 256, 4, 4, 128, True, torch.bfloat16, "cuda"))
    grads = impl.prepare(q, k, v, do, True, 128 ** -0.5, blocks, forward=name)()
    row = check_accuracy(grads, q, k, v, do, True, 128 ** -0.5, torch.bfloat16)
    assert row["correct"], row["_wrong_reason"]
