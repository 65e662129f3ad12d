"""The public entry point's errors: one-line ValueErrors, never silent wrong answers."""
import pytest
import torch

from variants import attention, get, names


from tests.conftest import DEVICE


def qkv(b=1, nq=8, nk=8, h=2, hkv=2, d=16, dtype=torch.float32):
    return tuple(torch.randn(b, n, heads, d, dtype=dtype, device=DEVICE) for n, heads in ((nq, h), (nk, hkv), (nk, hkv)))


def test_registry_lists_every_design_and_baseline():
    assert set(names()) >= {"two_pass", "atomic", "fused", "reference", "sdpa_flash", "sdpa_cudnn",
                            "sdpa_efficient", "flex"}


@pytest.mark.parametrize("make,match", [
    (lambda: (torch.randn(8, 2, 16), *qkv()[1:]), "q must be 4-D"),
    (lambda: (qkv(b=2)[0], *qkv(b=1)[1:]), "batch differs"),
    (lambda: qkv(h=3, hkv=2), "multiple of kv_heads"),
    (lambda: qkv(d=320), "head_dim must be <= 256"),
    (lambda: (qkv()[0].half(), *qkv()[1:]), "dtypes differ"),
    (lambda: (qkv()[0], qkv()[1], qkv(nk=9)[2]), "k and v shapes differ"),
    (lambda: (qkv()[0], qkv()[1].to("meta"), qkv()[2].to("meta")), "devices differ"),
    (lambda: (qkv(d=16)[0], *qkv(d=32)[1:]), "head dim differs"),
], ids=["rank", "batch", "gqa-ratio", "head-dim", "dtype", "kv-shape", "device", "head-dim-mismatch"])
def test_bad_input_is_one_line_value_error(make, match):
    with pytest.raises(ValueError, match=match) as info:
        attention(*make(), variant="two_pass")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("variant", ["two_pass", "reference"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_head_dim_zero_is_checked_before_the_default_scale(variant, packed):
    """Head dim 0 with the default scale (1 / sqrt(D)): the inputs' one-line ValueError, not a ZeroDivisionError."""
    q, k, v = qkv(d=0)
    varlen = dict(cu_seqlens_q=torch.tensor([0, 8], dtype=torch.int32, device=DEVICE)) if packed else {}
    if packed:
        q, k, v = q[0], k[0], v[0]  # [total, H, D]
    with pytest.raises(ValueError, match="head_dim must be >= 1, got 0") as info:
        attention(q, k, v, variant=variant, **varlen)
    assert "\n" not in str(info.value)


def test_unknown_variant_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown variant 'nope'; known: .*two_pass"):
        attention(*qkv(), variant="nope")


def test_unknown_layout():
    with pytest.raises(ValueError, match="layout"):
        attention(*qkv(), layout="nbhd")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal of GPU-only baselines")
@pytest.mark.parametrize("variant", ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex"])
def test_gpu_baseline_on_cpu_names_variant_and_reason(variant):
    with pytest.raises(ValueError, match=f"variant '{variant}' cannot run this problem: .*CUDA"):
        attention(*qkv(), variant=variant)


@pytest.mark.parametrize("variant,blocks,match", [
    ("atomic", {"BLOCK_M": 48}, "BLOCK_M=48: must be a power of two"),
    ("atomic", {"BLOCK_N": 8}, r"BLOCK_N=8: must be a power of two in \[16, 256\]"),
    ("atomic", {"num_warps": 3}, "num_warps=3"),
    ("atomic", {"num_stages": 0}, "num_stages=0"),
    ("two_pass", {"num_warps2": 5}, "num_warps2=5: must be one of"),
    ("atomic", {"deterministic": "yes"}, "deterministic"),
    ("two_pass", {"BLOCK_M": 64}, r"unknown field\(s\) \['BLOCK_M'\]"),
    ("fused", {"BLK_SLICE_FACTOR": 3}, "BLK_SLICE_FACTOR=3: must be a power of two"),
    ("fused", {"BLOCK_M1": 16, "BLK_SLICE_FACTOR": 2}, "BLOCK_M1=16: BLOCK_M1 / BLK_SLICE_FACTOR"),
    ("fused", {"BLOCK_M1": 128, "BLOCK_N2": 32, "BLK_SLICE_FACTOR": 4}, "BLOCK_N2=32: BLOCK_N2 / BLK_SLICE_FACTOR"),
])
def test_bad_block_config_names_field_and_rule(variant, blocks, match):
    with pytest.raises(ValueError, match=match):
        attention(*qkv(), variant=variant, blocks=blocks)


def test_blocks_override_defaults_field_by_field():
    from variants.problem import Problem
    impl = get("two_pass")
    problem = Problem.from_tensors(*qkv(), causal=False)
    blocks = impl.make_blocks(problem, {"BLOCK_M1": 32})
    assert blocks.BLOCK_M1 == 32 and blocks.BLOCK_N1 == impl.default_blocks(problem).BLOCK_N1


def test_reference_baseline_is_differentiable():
    q, k, v = (t.requires_grad_(True) for t in qkv())
    attention(q, k, v, causal=True, variant="reference").sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_flop_convention():
    from variants.problem import Problem
    full = Problem(2, 1024, 1024, 16, 16, 64, False, torch.bfloat16, "cuda")
    causal = Problem(2, 1024, 1024, 16, 16, 64, True, torch.bfloat16, "cuda")
    assert full.backward_flops() == 2.5 * 4 * 2 * 16 * 1024 * 1024 * 64
    assert causal.backward_flops() == full.backward_flops() / 2
    cross = Problem(1, 2, 5, 1, 1, 1, True, torch.bfloat16, "cuda")  # query i sees i + 4 keys: 4 + 5
    assert cross.visible_pairs == 9
    assert get("atomic").executed_flops(full, get("atomic").default_blocks(full)) == 2 * 5 * 2 * 16 * 1024 * 1024 * 64
    two_pass = get("two_pass")
    assert two_pass.executed_flops(full, two_pass.make_blocks(full, {"split_dkdv": False})) == 2 * 7 * 2 * 16 * 1024 * 1024 * 64
    assert two_pass.executed_flops(full, two_pass.make_blocks(full, {"split_dkdv": True})) == 2 * 8 * 2 * 16 * 1024 * 1024 * 64
