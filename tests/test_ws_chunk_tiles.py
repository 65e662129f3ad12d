"""Issue 43, D192 chunk tiles (ws's block field chunk_tiles): each D-wide shared tile and TMA box as two, [rows, 128]
+ [rows, 64], so a second Q / dO stage fits at 192 / 192. The block rule, the compile check (shared memory, spills),
and on an sm90 GPU the reference (results/h100/gluon/frontier_probe.md, "D192 chunk tiles")."""
import pytest
import torch

from tests.test_variants import make_inputs, run_and_check
from tests.test_ws import MAX_SMEM, ON_HOPPER, compiled_rows
from variants import get
from variants.problem import Problem


@pytest.mark.parametrize("variant", ["ws", "ws_two_pass"])
@pytest.mark.parametrize("head_dim, head_dim_v, applies", [(64, 64, False), (96, 96, False), (128, 128, False),
                                                           (192, 192, True), (192, 128, True), (256, 256, False)])
def test_chunk_tiles_applies_where_a_head_dim_has_two_chunks(variant, head_dim, head_dim_v, applies):
    problem = Problem(1, 128, 128, 2, 2, head_dim, True, torch.bfloat16, "cpu", head_dim_v=head_dim_v)
    if applies:
        assert get(variant).make_blocks(problem, dict(chunk_tiles=True)).chunk_tiles
    else:
        with pytest.raises(ValueError, match=f"chunk_tiles=true: changes nothing at head dim {head_dim} / "):
            get(variant).make_blocks(problem, dict(chunk_tiles=True))
    assert not get(variant).make_blocks(problem, dict(chunk_tiles=False)).chunk_tiles


@pytest.mark.parametrize("chunk_tiles", [False, True], ids=["256-wide", "chunk-tiles"])
def test_second_stage_fits_at_d192_with_chunk_tiles_only(chunk_tiles):
    """Two Q / dO stages at 192 / 192 (64 x 64, swap_ab=false): 273 KB with 256-wide tiles (over sm90's 227 KB),
    about 209.5 KB with chunk tiles, no spills."""
    blocks = f"{{'num_stages': 2, 'chunk_tiles': {chunk_tiles}}}"
    (row,) = compiled_rows(192, True, blocks)
    if chunk_tiles:
        assert row["status"] == "ok" and int(row["smem_bytes"]) <= MAX_SMEM, row
        assert row["spill_store_bytes"] == 0, row
    else:
        assert row["status"] != "ok" and "shared memory" in row["status"], row


CHUNKED = [("ws", dict(num_stages=2)), ("ws", dict(num_stages=2, persistent=True)),
           ("ws", dict(num_stages=2, warp_specialize=False)), ("ws", dict(num_stages=2, p_in_dq=True)),
           ("ws", dict(num_stages=2, deterministic=True)), ("ws_two_pass", {})]
CHUNKED_IDS = ["ws", "ws-persistent", "ws-one-partition", "ws-p-in-dq", "ws-deterministic", "ws_two_pass"]


@pytest.mark.skipif(not ON_HOPPER, reason="ws needs an sm90 GPU")
@pytest.mark.parametrize("variant, blocks", CHUNKED, ids=CHUNKED_IDS)
@pytest.mark.parametrize("shape", [(2, 200, 333, 4, 2), (1, 333, 200, 4, 1), (2, 256, 256, 2, 2)],
                         ids=["nq<nk-gqa", "nq>nk-mqa", "whole-blocks"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim_v", [192, 128])
def test_chunk_tiles_match_reference_on_hopper(variant, blocks, shape, causal, head_dim_v):
    torch.manual_seed(hash((variant, shape, causal, head_dim_v)) % 2**31)
    q, k, v, do = make_inputs((*shape, 192), torch.bfloat16, "cuda")
    if head_dim_v != 192:
        v, do = v[..., :head_dim_v].contiguous(), do[..., :head_dim_v].contiguous()
    run_and_check(variant, q, k, v, do, causal, blocks=dict(blocks, chunk_tiles=True))
