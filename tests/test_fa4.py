"""The fa4 baseline (FlashAttention-4, variants/fa4.py) on a CPU: without the package a point is an `unsupported` row
that says how to install it; with a stand-in `flash_attn.cute` (the fp32 reference behind FA4's two entry points,
recording what it is given) the baseline passes layouts, scale, causal, window, softcap, cu_seqlens and GQA as FA4
takes them, its gradients match the reference, and a runner point is `ok` and correct. What FA4 lacks is refused."""
import re
import subprocess
import sys
import types

import pytest
import torch

from runners import sweep  # runners.* set TRITON_INTERPRET before `import variants`
from runners.point import env
from tests.test_runner import cfg_for, rows
from variants import attention, fa4
from variants.problem import Problem
from variants.reference import reference_forward, reference_grads

POINT = ["variant=fa4", "seq=128", "batch=1", "heads=2", "head_dim=64", "dtype=fp16"]


def fake_cute(calls: list, return_lse: bool) -> types.ModuleType:
    """A stand-in flash_attn.cute: FA4's keywords, the fp32 reference's math (differentiable), each call recorded."""
    def run(kind, q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, **kwargs):
        calls.append(dict(kind=kind, q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, **kwargs))
        window = tuple(-1 if w is None else w for w in kwargs["window_size"])  # FA4: None = unbounded
        o = reference_forward(q, k, v, kwargs["causal"], kwargs["softmax_scale"], cu_seqlens_q=cu_seqlens_q,
                              cu_seqlens_k=cu_seqlens_k, window_size=window, softcap=kwargs["softcap"],
                              sink=kwargs["learnable_sink"]).to(q.dtype)
        return (o, torch.zeros(1)) if return_lse else o

    def flash_attn_func(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False,
                        window_size=(None, None), learnable_sink=None, softcap=0.0, **rest):
        return run("dense", q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                   softcap=softcap, learnable_sink=learnable_sink, rest=rest)

    def flash_attn_varlen_func(q, k, v, qv=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                               max_seqlen_k=None, softmax_scale=None, causal=False, window_size=(None, None),
                               learnable_sink=None, softcap=0.0, **rest):
        return run("varlen", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                   max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                   softcap=softcap, learnable_sink=learnable_sink, rest=rest)

    module = types.ModuleType(fa4.MODULE)
    module.flash_attn_func, module.flash_attn_varlen_func = flash_attn_func, flash_attn_varlen_func
    return module


@pytest.fixture(params=[False, True], ids=["returns-out", "returns-out-lse"])
def calls(request, monkeypatch):
    """The stand-in installed on an sm90 'GPU' (the device check patched: the tensors stay on the CPU)."""
    recorded = []
    monkeypatch.setitem(sys.modules, fa4.MODULE, fake_cute(recorded, return_lse=request.param))
    monkeypatch.setattr(fa4, "gpu_major", lambda problem: 9)
    return recorded


def inputs(b=2, nq=33, nk=33, h=4, hkv=4, d=64, dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = ((b, nq, h, d), (b, nk, hkv, d), (b, nk, hkv, d), (b, nq, h, d))
    return tuple(torch.randn(s, generator=gen).to(dtype) for s in shapes)


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def assert_grads_match(got, want, what=""):
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert a.shape == b.shape, f"{what} {name}"
        torch.testing.assert_close(a.float(), b, atol=2e-3, rtol=1e-2, msg=f"{what} {name}")


# ---- without the package -------------------------------------------------------------------------------------------

def test_not_installed_is_found_without_importing_anything(monkeypatch):
    monkeypatch.delitem(sys.modules, fa4.MODULE, raising=False)
    if fa4.installed():
        pytest.skip("flash-attn-4 is installed here")
    assert "flash_attn" not in sys.modules and fa4.MODULE not in sys.modules
    problem = Problem(1, 128, 128, 2, 2, 64, False, torch.float16, "cpu")
    assert fa4.FlashAttention4().supports(problem) == fa4.NOT_INSTALLED
    assert "pip install -e '.[fa4]'" in fa4.NOT_INSTALLED and "scripts/fa4_install.sh" in fa4.NOT_INSTALLED


@pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")
def test_a_point_without_the_package_is_an_unsupported_row(tmp_path, monkeypatch):
    monkeypatch.setattr(fa4, "installed", lambda: False)
    sweep.run_point(cfg_for(tmp_path, *POINT), out=lambda _: None)
    r = rows(tmp_path).iloc[0]
    assert (r.variant, r.status, r.reason) == ("fa4", "unsupported", fa4.NOT_INSTALLED)


@pytest.mark.skipif(fa4.installed(), reason="flash-attn-4 is installed here")
def test_the_sweep_command_writes_the_row_and_exits_0(tmp_path):
    run = subprocess.run([sys.executable, "-m", "runners.sweep", *POINT, f"results_dir={tmp_path}", "sweep_id=fa4"],
                         cwd=env.REPO, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    from runners.tables import results
    r = results.load(tmp_path).iloc[0]
    assert (r.variant, r.status, r.reason) == ("fa4", "unsupported", fa4.NOT_INSTALLED)


# ---- what FA4 lacks: the reason ------------------------------------------------------------------------------------

@pytest.mark.parametrize("problem, major, match", [
    (Problem(1, 64, 64, 2, 2, 64, True, torch.float16, "cpu").with_modifiers(gate=True), 9, "does not implement gate"),
    (Problem(1, 64, 64, 2, 2, 64, False, torch.float32, "cpu"), 9, "fp16 and bf16, not torch.float32"),
    (Problem(1, 64, 64, 2, 2, 36, False, torch.float16, "cuda"), 9, "on sm90 takes head dims 8-256 .* not 36"),
    (Problem(1, 64, 64, 2, 2, 192, False, torch.bfloat16, "cuda"), 10,
     r"on sm100 takes head dims 8-128, 256 or \(192, 128\)"),
    (Problem(1, 64, 64, 2, 2, 64, False, torch.float16, "cuda"), 8, "sm90 and sm100 here, not on compute capability 8"),
    (Problem(1, 64, 64, 2, 2, 64, False, torch.float16, "cpu"), None, "needs a CUDA GPU"),
], ids=["gate", "fp32", "sm90-head-dim-36", "sm100-head-dim-192", "sm80", "cpu"])
def test_what_fa4_lacks_is_refused_with_the_reason(calls, monkeypatch, problem, major, match):
    monkeypatch.setattr(fa4, "gpu_major", lambda p: major)
    reason = fa4.FlashAttention4().supports(problem)
    assert reason is not None and "\n" not in reason
    assert re.search(match, reason), reason


@pytest.mark.parametrize("major, head_dims", [(9, (8, 64, 96, 128, 192, 256)), (10, (64, 128, 256))])
def test_its_head_dims_are_served(calls, monkeypatch, major, head_dims):
    monkeypatch.setattr(fa4, "gpu_major", lambda p: major)
    for d in head_dims:
        for dtype in (torch.float16, torch.bfloat16):
            assert fa4.FlashAttention4().supports(Problem(1, 64, 64, 4, 1, d, True, dtype, "cuda")) is None, d


@pytest.mark.parametrize("major, head_dims, served", [
    (9, (192, 128), True), (9, (64, 32), True), (9, (256, 128), True), (9, (192, 36), False),
    (10, (192, 128), True), (10, (128, 64), True), (10, (256, 128), False), (10, (192, 64), False)])
def test_value_head_dims_follow_its_rule(calls, monkeypatch, major, head_dims, served):
    """Issue 47: FA4 takes v of its own head dim by its sm90 / sm100 rule, and refuses the rest with the reason."""
    monkeypatch.setattr(fa4, "gpu_major", lambda p: major)
    d, dv = head_dims
    problem = Problem(1, 64, 64, 4, 1, d, True, torch.bfloat16, "cuda", head_dim_v=dv)
    reason = fa4.FlashAttention4().supports(problem)
    assert (reason is None) == served, reason
    if not served:
        assert f"not {d} / {dv}" in reason and "\n" not in reason


# ---- with FA4 (the stand-in): what it is given, and the gradients ---------------------------------------------------

@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_mla_head_dims_and_sink_reach_fa4(calls, causal):
    """Issue 47: v with its own head dim goes to FA4 as it is, the sink as learnable_sink (fp32 [H], the very tensor),
    and the gradients (the sink's too) are the reference's."""
    q, k, _, _ = inputs(nq=29, nk=41, h=4, hkv=2, d=64)
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(2, 41, 2, 32, generator=gen).half()
    do = torch.randn(2, 29, 4, 32, generator=gen).half()
    sink = torch.randn(4, generator=gen)
    q_, k_, v_, sink_ = leaves(q, k, v, sink)
    o = attention(q_, k_, v_, causal=causal, scale=0.11, variant="fa4", sink=sink_)
    assert o.shape == (2, 29, 4, 32)
    o.backward(do)
    (call,) = calls
    assert call["learnable_sink"] is sink_ and call["v"].shape == (2, 41, 2, 32)
    _, dq, dk, dv, dsink = reference_grads(q, k, v, do, causal, 0.11, sink=sink)
    assert_grads_match((q_.grad, k_.grad, v_.grad), (dq, dk, dv))
    torch.testing.assert_close(sink_.grad, dsink, atol=2e-3, rtol=1e-2)
    assert dsink.abs().max() > 1e-2  # a gradient that could be told from zero


def test_no_sink_passes_no_learnable_sink(calls):
    q, k, v, do = inputs()
    attention(*leaves(q, k, v), variant="fa4").backward(do)
    assert calls[-1]["learnable_sink"] is None


@pytest.mark.parametrize("causal, nq, nk, h, hkv", [
    (False, 33, 33, 4, 4), (True, 33, 33, 4, 4), (True, 20, 45, 4, 2), (True, 45, 20, 4, 1), (False, 17, 40, 6, 2)],
    ids=["plain", "causal", "causal-Nq<Nk-GQA", "causal-Nq>Nk-MQA", "Nq!=Nk-GQA"])
def test_dense_call_and_gradients(calls, causal, nq, nk, h, hkv):
    q, k, v, do = inputs(nq=nq, nk=nk, h=h, hkv=hkv)
    q_, k_, v_ = leaves(q, k, v)
    attention(q_, k_, v_, causal=causal, scale=0.11, variant="fa4").backward(do)
    (call,) = calls
    assert call["kind"] == "dense" and call["rest"] == {}
    assert (call["softmax_scale"], call["causal"], call["window_size"], call["softcap"]) == (0.11, causal,
                                                                                            (None, None), 0.0)
    assert call["q"].shape == (2, nq, h, 64) and call["k"].shape == call["v"].shape == (2, nk, hkv, 64)
    assert call["k"].data_ptr() == k_.data_ptr() and call["v"].data_ptr() == v_.data_ptr()  # GQA: never repeated
    _, dq, dk, dv = reference_grads(q, k, v, do, causal, 0.11)
    assert_grads_match((q_.grad, k_.grad, v_.grad), (dq, dk, dv))


def test_layouts_reach_fa4_as_b_n_h_d_with_a_contiguous_head_dim(calls):
    q, k, v, do = inputs(h=4, hkv=2)
    # [B, H, N, D] inputs (layout="bhnd"): FA4 gets their [B, N, H, D] views, not copies
    bhnd = leaves(*(t.transpose(1, 2).contiguous() for t in (q, k, v)))
    attention(*bhnd, causal=True, variant="fa4", layout="bhnd").backward(do.transpose(1, 2))
    call = calls[-1]
    assert call["q"].shape == q.shape and call["k"].shape == k.shape
    assert all(call[n].stride(-1) == 1 and call[n].data_ptr() == t.data_ptr() for n, t in zip("qkv", bhnd))
    _, dq, dk, dv = reference_grads(q, k, v, do, True, None)
    assert_grads_match([t.grad.transpose(1, 2) for t in bhnd], (dq, dk, dv), "bhnd")
    assert call["softmax_scale"] == pytest.approx(64 ** -0.5)  # the default scale, given explicitly
    # a strided head dim: copied to what FA4's kernels read
    bases = leaves(*(torch.stack((t, t), -1) for t in (q, k, v)))  # [..., D, 2]: element d of the head at 2d
    strided = [t[..., 0] for t in bases]
    assert strided[0].stride(-1) == 2
    attention(*strided, variant="fa4").backward(do)
    assert all(calls[-1][n].stride(-1) == 1 for n in "qkv")
    _, dq, dk, dv = reference_grads(q, k, v, do, False, None)
    assert_grads_match([t.grad[..., 0] for t in bases], (dq, dk, dv), "strided")


@pytest.mark.parametrize("causal, window, softcap, expected", [
    (False, (5, 3), 0.0, (5, 3)),
    (False, (-1, 2), 0.0, (None, 2)),
    (False, (4, -1), 2.5, (4, None)),
    (True, (6, 0), 0.0, (6, 0)),
    (True, None, 3.0, (None, None)),
], ids=["window-5-3", "window-right-only", "window-left-only-softcap", "causal-window", "causal-softcap"])
def test_window_and_softcap(calls, causal, window, softcap, expected):
    q, k, v, do = inputs(nq=30, nk=38, h=4, hkv=2)
    q_, k_, v_ = leaves(q, k, v)
    attention(q_, k_, v_, causal=causal, variant="fa4", window_size=window, softcap=softcap).backward(do)
    (call,) = calls
    assert (call["causal"], call["window_size"], call["softcap"]) == (causal, expected, softcap)
    _, dq, dk, dv = reference_grads(q, k, v, do, causal, None, window_size=window, softcap=softcap)
    assert_grads_match((q_.grad, k_.grad, v_.grad), (dq, dk, dv))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_packed_documents(calls, causal):
    lens_q, lens_k = (7, 0, 19, 12), (9, 4, 19, 5)  # an empty document; Nq != Nk per document
    cu_q = torch.tensor([0, 7, 7, 26, 38], dtype=torch.int32)
    cu_k = torch.tensor([0, 9, 13, 32, 37], dtype=torch.int32)
    q, k, v, do = (t[0] for t in inputs(b=1, nq=sum(lens_q), nk=sum(lens_k), h=4, hkv=2))
    q_, k_, v_ = leaves(q, k, v)
    attention(q_, k_, v_, causal=causal, variant="fa4", cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, window_size=(8, -1),
              softcap=4.0).backward(do)
    (call,) = calls
    assert call["kind"] == "varlen" and call["rest"] == {}
    assert call["cu_seqlens_q"].dtype == call["cu_seqlens_k"].dtype == torch.int32
    assert call["cu_seqlens_q"].tolist() == cu_q.tolist() and call["cu_seqlens_k"].tolist() == cu_k.tolist()
    assert (call["max_seqlen_q"], call["max_seqlen_k"]) == (19, 19)
    assert type(call["max_seqlen_q"]) is int and type(call["max_seqlen_k"]) is int
    assert call["q"].shape == (38, 4, 64) and call["k"].shape == (37, 2, 64)
    assert (call["window_size"], call["softcap"]) == ((8, 0 if causal else None), 4.0)
    _, dq, dk, dv = reference_grads(q, k, v, do, causal, None, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                    window_size=(8, -1), softcap=4.0)
    assert_grads_match((q_.grad, k_.grad, v_.grad), (dq, dk, dv))


@pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")
@pytest.mark.parametrize("overrides", [
    ["causal=true", "heads=4", "kv_heads=2", "seq_k=23"],
    ["causal=true", "window=5", "softcap=3", "layout=bhnd"],
    ["causal=true", "varlen=uniform", "tokens=40", "seq=12", "heads=4", "kv_heads=2"],
], ids=["gqa-Nq!=Nk", "window-softcap-bhnd", "packed"])
def test_a_runner_point_is_ok_and_correct(tmp_path, calls, overrides):
    sweep.run_point(cfg_for(tmp_path, "variant=fa4", "dtype=fp16", *overrides), out=lambda _: None)
    r = rows(tmp_path).iloc[0]
    assert (r.variant, r.status, bool(r.correct)) == ("fa4", "ok", True), r.reason
    assert calls and all(c["rest"] == {} for c in calls)


def test_fa4_is_a_registered_baseline_with_a_colour_of_its_own():
    """Tables, plots, the report and runners.regress list it from the registry, as they do sdpa_cudnn."""
    from plots import common as C
    from runners import tables as T
    assert "fa4" in T.BASELINE_VARIANTS and not T.is_triton("fa4")
    order = list(T.VARIANT_ORDER)
    assert order.index("sdpa_cudnn") < order.index("flex") < order.index("fa4") < order.index("reference")
    assert T.VARIANT_LABELS["fa4"] == "fa4 (FlashAttention-4)"
    others = {C.variant_color(v) for v in C.plot_series() if v != "fa4"} | set(C.DESIGN_COLORS + C.BASELINE_COLORS)
    assert C.variant_color("fa4") == "magenta" and "magenta" not in others | {"red", "tab:red"}
    assert C.variant_style("fa4")["linestyle"] == "--"  # a baseline's dashed line
