"""runners.point.profile: per-kernel times from profiler events, kernel names, occupancy, compiled resources, and the
empty columns (with the reason) where there is nothing to read. CPU only, except the last test (GPU)."""
import json
import math
from types import SimpleNamespace

import pytest
import torch

from runners.point import env, profile

HOPPER = dict(profile.HOPPER_LIMITS)


def _event(name, us, device="DeviceType.CUDA", annotation=False):
    return SimpleNamespace(name=name, device_type=device, is_user_annotation=annotation,
                           time_range=SimpleNamespace(elapsed_us=lambda: us))


def test_kernel_ms_per_call_summed_by_name_largest_first():
    events = [_event("_dkdv_kernel", 600.0), _event("_dq_kernel", 300.0), _event("_delta_kernel", 30.0),
              _event("_dkdv_kernel", 620.0), _event("_dq_kernel", 280.0), _event("_delta_kernel", 30.0),
              _event("aten::empty", 5.0, device="DeviceType.CPU"),  # host events are not kernels
              _event("my_range", 2000.0, annotation=True)]  # a GPU-side annotation spans kernels: not one
    ms, launches = profile.kernel_ms_from_events(events, calls=2)
    assert list(ms) == ["_dkdv_kernel", "_dq_kernel", "_delta_kernel"]
    assert ms["_dkdv_kernel"] == pytest.approx(0.61) and ms["_delta_kernel"] == pytest.approx(0.03)
    assert launches == 6


@pytest.mark.parametrize("raw, short", [
    ("_dkdv_kernel", "_dkdv_kernel"),
    ("void flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128>>(Flash_bwd_params)",
     "flash_bwd_dot_do_o_kernel"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
     "vectorized_elementwise_kernel[FillFunctor]"),
    ("Memset (Device)", "Memset"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x128_4x1x1_kernel0_0",
     "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x128_4x1x1_kernel0_0"),
])
def test_short_kernel_name(raw, short):
    assert profile.short_kernel_name(raw) == short


@pytest.mark.parametrize("regs, smem, warps, programs, limiter", [
    (255, 0, 4, 2, "regs"),  # 256 regs x 32 lanes x 4 warps = 32768 per program: 2 fit in 65536
    (128, 0, 8, 2, "regs"),
    (24, 0, 4, 16, "warps"),  # 64 warps per SM / 4 (registers would allow 21)
    (64, 100 * 1024, 4, 2, "smem"),  # 228 KB / (100 KB + 1 KB reserved)
    (16, 0, 1, 32, "blocks"),  # at most 32 resident programs
    (None, 0, 4, None, None),  # register count unknown: no claim
])
def test_programs_per_sm(regs, smem, warps, programs, limiter):
    assert profile.programs_per_sm(regs, smem, warps, HOPPER) == (programs, limiter)


def _compiled(name, regs, spills, shared, warps, stages):
    return SimpleNamespace(name=name, n_regs=regs, n_spills=spills,
                           metadata=SimpleNamespace(name=name, shared=shared, num_warps=warps, num_stages=stages))


def test_compiled_resources_one_entry_per_compiled_kernel():
    dkdv, dq = _compiled("_dkdv_kernel", 232, 8, 98304, 8, 2), _compiled("_dq_kernel", 168, 0, 65536, 4, 3)
    launched = [(dkdv, (64, 16, 4)), (dq, (64, 16, 4)), (dkdv, (64, 16, 4))]  # 2 calls of a backward
    res = profile.compiled_resources(launched, HOPPER)
    assert set(res) == {"_dkdv_kernel", "_dq_kernel"}
    d = res["_dkdv_kernel"]
    assert (d["n_regs"], d["n_spills"], d["smem_bytes"], d["num_warps"], d["num_stages"]) == (232, 8, 98304, 8, 2)
    assert (d["programs_per_sm"], d["limiter"]) == (1, "regs") and d["grid_programs"] == 4096
    assert d["waves"] == pytest.approx(4096 / 132, abs=0.01)


def test_explain_on_the_interpreter_leaves_the_columns_empty_and_says_why():
    cols = profile.explain(lambda: None, on_gpu=False)
    assert set(cols) == set(profile.EMPTY)
    assert cols["kernel_ms"] is None and cols["resources_json"] is None and math.isnan(cols["kernel_ms_sum"])
    assert "interpreter" in cols["profile_note"]


def test_explain_survives_a_failing_profiled_run(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
    monkeypatch.setattr(profile, "kernel_breakdown", broken)
    cols = profile.explain(lambda: None, on_gpu=True)
    assert cols["kernel_ms"] is None and "CUPTI_ERROR_NOT_INITIALIZED" in cols["profile_note"]


def test_explain_columns_from_a_profiled_run(monkeypatch):
    """explain() wires breakdown and resources into the row: the top kernel, its share, the heaviest Triton
    kernel's flat columns."""
    dkdv, dq = _compiled("_dkdv_kernel", 232, 8, 98304, 8, 2), _compiled("_dq_kernel", 168, 0, 65536, 4, 3)

    def fake_breakdown(fn, calls, device):
        profile_launched.extend([(dq, (8, 1, 1)), (dkdv, (8, 1, 1))])
        return {"_dkdv_kernel": 0.6, "_dq_kernel": 0.3, "_delta_kernel": 0.1}, 9

    profile_launched = []
    monkeypatch.setattr(profile, "kernel_breakdown", fake_breakdown)
    monkeypatch.setattr(profile, "capture_compiled", lambda: _Yield(profile_launched))
    monkeypatch.setattr(profile, "device_limits", lambda device: HOPPER)
    cols = profile.explain(lambda: None, on_gpu=True, calls=3)
    assert json.loads(cols["kernel_ms"]) == {"_dkdv_kernel": 0.6, "_dq_kernel": 0.3, "_delta_kernel": 0.1}
    assert cols["kernel_ms_sum"] == pytest.approx(1.0) and cols["kernel_launches"] == 3
    assert cols["top_kernel"] == "_dkdv_kernel" and cols["top_kernel_share"] == pytest.approx(0.6)
    assert cols["top_triton_kernel"] == "_dkdv_kernel" and cols["n_regs"] == 232 and cols["n_spills"] == 8
    assert cols["programs_per_sm"] == 1 and cols["occupancy_limiter"] == "regs" and cols["profile_note"] is None
    assert set(json.loads(cols["resources_json"])) == {"_dkdv_kernel", "_dq_kernel"}


class _Yield:
    def __init__(self, value):
        self.value = value

    def __enter__(self):
        return self.value

    def __exit__(self, *exc):
        return False


@pytest.mark.skipif(not torch.cuda.is_available() or env.interpreting(), reason="needs a CUDA GPU")
def test_two_pass_backward_explained_on_gpu():
    import variants
    from variants.problem import DTYPES
    q, k, v, do = (torch.randn(2, 1024, 8, 64, device="cuda", dtype=DTYPES["bf16"]) for _ in range(4))
    impl = variants.get("two_pass")
    problem = variants.Problem.from_tensors(q, k, v, True)
    fn = impl.prepare(q, k, v, do, True, 0.125, impl.make_blocks(problem))
    fn()
    cols = profile.explain(fn, on_gpu=True)
    kernels = json.loads(cols["kernel_ms"])
    assert {"_dkdv_kernel", "_dq_kernel", "_delta_kernel"} <= set(kernels) and cols["kernel_ms_sum"] > 0
    resources = json.loads(cols["resources_json"])
    assert {"_dkdv_kernel", "_dq_kernel", "_delta_kernel"} <= set(resources)
    assert all(r["n_regs"] > 0 and r["programs_per_sm"] >= 1 for r in resources.values())
