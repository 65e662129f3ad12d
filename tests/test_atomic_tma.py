"""atomic_tma's switches against the fp32 reference, and where its TMA paths fall back.

On the CPU interpreter (Triton 3.9) descriptor loads run, but descriptor reduce (desc.atomic_add) does
not exist there: dQ goes through the per-element fallback, which these tests then cover. The TMA
reduce path itself is covered by the GPU-only test at the end (skips without CUDA).
"""
import pytest
import torch

from kernels.atomic_tma import tma_paths
from tests.test_variants import ON_GPU, SMALL_BLOCKS, make_inputs, run_and_check, shape_id

BLOCKS = SMALL_BLOCKS["atomic_tma"]
SHAPES = [(1, 63, 100, 4, 2, 80), (2, 100, 63, 2, 1, 40), (1, 96, 64, 2, 2, 32)]
MODES = {
    "tma": {},
    "pointer-loads": {"tma_load": False},
    "atomics": {"tma_reduce": False},
    "pointer-loads-atomics": {"tma_load": False, "tma_reduce": False},
    "deterministic": {"deterministic": True},
    "warp-specialize": {"warp_specialize": True},
    "longest-first": {"longest_first": True},
}


# The fast GPU tier keeps the default mode on the first shape; the rest of the matrix is `slow` (docs/testing.md).
MODE_CASES = [pytest.param(mode, shape, id=f"{shape_id(shape, True)}-{mode}",
                           marks=() if (mode, shape) == ("tma", SHAPES[0]) else pytest.mark.slow)
              for mode in MODES for shape in SHAPES]


@pytest.mark.parametrize("mode, shape", MODE_CASES)
def test_modes_match_reference(mode, shape, device):
    torch.manual_seed(hash((mode, shape)) % 2**31)
    run_and_check("atomic_tma", *make_inputs(shape, torch.float32, device), True, blocks={**BLOCKS, **MODES[mode]})


@pytest.mark.parametrize("layout", ["bnhd", "bhnd"])
def test_fp16_layouts(layout, device):
    run_and_check("atomic_tma", *make_inputs((1, 70, 90, 4, 2, 48), torch.float16, device, layout=layout),
                  False, blocks=BLOCKS, layout=layout)


def test_unaligned_strides_fall_back_to_pointer_loads(device):
    """D = 6 fp16: 12-byte rows cannot be a TMA tile; the variant runs anyway, through pointer loads."""
    q, k, v, do = make_inputs((1, 40, 40, 1, 1, 6), torch.float16, device)
    can_load, _, reason = tma_paths(q, k, v, do)
    assert not can_load and reason
    run_and_check("atomic_tma", q, k, v, do, True, blocks=BLOCKS)


def test_head_dim_slice_is_not_descriptor_loadable(device):
    """A view with a non-unit head-dim stride is read through pointers, never through a descriptor."""
    q, k, v, do = make_inputs((1, 32, 32, 2, 2, 16), torch.float32, device)
    wide = torch.randn(1, 32, 2, 32, device=device)[..., ::2]  # head-dim stride 2
    assert not tma_paths(wide, k, v, do)[0]
    run_and_check("atomic_tma", wide, k, v, do, False, blocks=BLOCKS)


@pytest.mark.skipif(not ON_GPU, reason="TMA reduce needs an sm90 GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, pytest.param(torch.float16, marks=pytest.mark.slow),
                                   pytest.param(torch.float32, marks=pytest.mark.slow)], ids=str)
def test_tma_reduce_on_gpu(dtype, device):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm90+")
    q, k, v, do = make_inputs((2, 257, 193, 8, 2, 96), dtype, device)
    assert tma_paths(q, k, v, do)[:2] == (True, True)
    big_tiles = {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3}  # > smem for fp32 operands
    for mode in ({}, {"tma_load": False}, big_tiles if dtype != torch.float32 else {}):
        run_and_check("atomic_tma", q, k, v, do, True, blocks=mode or None)


@pytest.mark.skipif(not ON_GPU, reason="TMA reduce needs an sm90 GPU")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tma_reduce_packed_on_gpu(causal, device):
    """Packed documents through descriptor loads and the reduce-add: per-document descriptor shapes, tiles
    that straddle a document's end, an empty document and one without keys, Nq != Nk, GQA."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm90+")
    from tests.test_varlen import packed_inputs, run_and_check_packed
    inputs = packed_inputs([257, 1, 0, 130, 500], [193, 1, 5, 0, 511], 8, 2, 96, torch.bfloat16, device)
    assert tma_paths(*(t.unsqueeze(0) for t in inputs[:4]))[:2] == (True, True)
    for mode in ({}, {"tma_load": False}):
        run_and_check_packed("atomic_tma", *inputs, causal, blocks=mode or None)
