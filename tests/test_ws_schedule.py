"""ws's causal tile chunks with scheduled_chunks (kernels.gluon.chunks.backward_chunk_heads): the chosen chunk
ends the simulated list schedule no later than about one wave (`chunk_heads`, the default) and keeps the L2 cap; the
numbering it feeds covers every tile once. Host code only: runs on the CPU."""
import pytest
import torch

from kernels.common import cdiv
from kernels.gluon.chunks import L2_BUDGET_BYTES, backward_chunk_heads, list_schedule_end
from kernels.gluon.scheduler import TILE_SETUP_STEPS, backward_costs, chunk_heads, query_steps, tile_schedule

SMS = 132


def schedule_end(pairs: int, steps: tuple, chunk: int) -> int:
    return list_schedule_end(backward_costs(chunk, pairs, steps), SMS)


# the FA grid's causal cells (B x Hkv pairs, N, ws's tile) and a GQA and an MLA one
CELLS = [(512, 1024, 128, 128, 1), (128, 4096, 128, 128, 1), (32, 16384, 128, 128, 1), (256, 1024, 64, 128, 1),
         (64, 4096, 64, 128, 1), (16, 16384, 64, 128, 1), (16, 4096, 64, 128, 4), (32, 4096, 64, 64, 1)]


@pytest.mark.parametrize("pairs, seq, block_m, block_n, group", CELLS)
def test_the_chosen_chunk_ends_no_later_than_one_wave(pairs, seq, block_m, block_n, group):
    steps = query_steps(seq, seq, block_m, block_n, group, True)
    chunk = backward_chunk_heads(SMS, pairs, steps)
    one_wave = chunk_heads(torch.device("cpu"), seq, block_n, pairs, True)
    assert 1 <= chunk <= pairs
    chosen, wave = schedule_end(pairs, steps, chunk), schedule_end(pairs, steps, one_wave)
    assert chosen <= wave
    ideal = pairs * sum(s + TILE_SETUP_STEPS for s in steps) / SMS
    assert chosen <= 1.025 * ideal + max(steps)


def test_the_gain_at_the_fa_grids_d128_n1024_cell():
    """B16 H16 N1024, 64 x 128 tiles: one wave (17 pairs) ends 7.8 % after the perfect split, the chosen chunk 2 %."""
    steps = query_steps(1024, 1024, 64, 128, 1, True)
    ideal = 256 * sum(s + TILE_SETUP_STEPS for s in steps) / SMS
    assert schedule_end(256, steps, 17) > 1.07 * ideal
    assert schedule_end(256, steps, backward_chunk_heads(SMS, 256, steps)) < 1.03 * ideal


def test_the_chunk_keeps_its_rows_within_the_l2_budget():
    steps = query_steps(4096, 4096, 64, 128, 1, True)
    pair_bytes = 4096 * (2 * 128 * 2 + 4 * 128)  # Q, dO bf16 and the fp32 dQ rows of one pair at D128
    chunk = backward_chunk_heads(SMS, 64, steps, pair_bytes)
    assert chunk * pair_bytes <= L2_BUDGET_BYTES
    assert backward_chunk_heads(SMS, 64, steps, 2 * L2_BUDGET_BYTES) == 1


@pytest.mark.parametrize("pairs, chunk", [(9, 4), (9, 9), (7, 3)])
def test_a_persistent_schedule_of_any_chunk_covers_every_tile_once(pairs, chunk):
    steps = query_steps(1000, 1000, 64, 128, 2, True)
    tiles, starts = tile_schedule(torch.device("cpu"), cdiv(1000, 128), pairs, chunk, steps)
    assert sorted(tiles.tolist()) == list(range(len(steps) * pairs))
