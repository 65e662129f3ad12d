"""The causal Gluon forward's program order with FwdBlocks.lpt (kernels.gluon.chunks): the numbering covers every
(batch-head pair, query block) once, the chunk it picks ends the simulated list schedule no later than one head per
chunk, and the L2 cap holds. Host code only: runs on the CPU."""
import itertools

import pytest

from kernels.gluon.chunks import (FORWARD_SETUP_STEPS, L2_BUDGET_BYTES, causal_key_blocks, forward_chunk_heads,
                                  forward_costs, forward_program, list_schedule_end, window_key_blocks)


@pytest.mark.parametrize("chunk, pairs, blocks", [(1, 5, 7), (2, 5, 7), (3, 7, 4), (7, 7, 3), (4, 9, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_numbering_covers_every_block_once(chunk, pairs, blocks, causal):
    seen = [forward_program(pid, chunk, pairs, blocks, causal) for pid in range(pairs * blocks)]
    assert sorted(seen) == list(itertools.product(range(pairs), range(blocks)))


def test_one_head_per_chunk_is_the_order_without_lpt():
    """chunk 1: each head's query blocks in turn, causal from the last (the kernel's order before lpt)."""
    assert [forward_program(pid, 1, 3, 4, True) for pid in range(5)] == [(0, 3), (0, 2), (0, 1), (0, 0), (1, 3)]
    assert [forward_program(pid, 1, 3, 4, False) for pid in range(5)] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]


def test_a_chunk_starts_its_longest_blocks_first_across_its_heads():
    assert [forward_program(pid, 2, 3, 3, True) for pid in range(8)] == [
        (0, 2), (1, 2), (0, 1), (1, 1), (0, 0), (1, 0), (2, 2), (2, 1)]


@pytest.mark.parametrize("seq_q, seq_k, block_m, block_n", [(400, 400, 128, 128), (500, 500, 192, 128),
                                                            (300, 200, 128, 64), (200, 500, 64, 128)])
def test_causal_key_blocks_count_the_bottom_right_diagonal(seq_q, seq_k, block_m, block_n):
    """By brute force over the block's rows (a tail block's too: the kernel walks for all BLOCK_M of them): the key
    blocks holding a key some row sees (key j <= i + Nk - Nq), at least one."""
    expected = []
    for start in range(0, seq_q, block_m):
        seen = {j // block_n for i in range(start, start + block_m) for j in range(seq_k) if j <= i + seq_k - seq_q}
        expected.append(max(len(seen), 1))
    assert causal_key_blocks(seq_q, seq_k, block_m, block_n) == tuple(expected)


@pytest.mark.parametrize("seq_q, seq_k, block_m, block_n, left, right", [
    (400, 400, 128, 128, 100, -1), (500, 500, 192, 128, 300, 0), (300, 200, 128, 64, 40, 0),
    (900, 300, 192, 128, 40, 0), (200, 500, 64, 128, 10, 70), (640, 640, 128, 128, -1, 5),
    (333, 1000, 128, 128, 0, 0), (257, 257, 64, 32, 1000, 1000)])
def test_window_key_blocks_walk_exactly_the_blocks_the_window_reaches(seq_q, seq_k, block_m, block_n, left, right):
    """By brute force over the block's rows (a tail block's too): the walk runs from the first key block a row sees
    to the last (query i sees key j iff i + Nk - Nq - left <= j <= i + Nk - Nq + right, -1 unbounded), with no
    block inside that run left out, and one block where no row sees a key (Nq > Nk, a narrow window)."""
    shift, expected = seq_k - seq_q, []
    for start in range(0, seq_q, block_m):
        seen = {j // block_n for i in range(start, start + block_m) for j in range(seq_k)
                if (right < 0 or j <= i + shift + right) and (left < 0 or j >= i + shift - left)}
        expected.append(max(seen) - min(seen) + 1 if seen else 1)
    assert window_key_blocks(seq_q, seq_k, block_m, block_n, left, right) == tuple(expected)


@pytest.mark.parametrize("pairs, seq", [(256, 1024), (64, 4096), (32, 4096), (16, 4096), (16, 16384), (512, 1024)])
def test_the_chosen_chunk_ends_no_later_than_one_head_per_chunk(pairs, seq):
    key_blocks = causal_key_blocks(seq, seq, 128, 128)
    chunk = forward_chunk_heads(132, pairs, key_blocks)
    assert 1 <= chunk <= pairs
    chosen = list_schedule_end(forward_costs(chunk, pairs, key_blocks), 132)
    assert chosen <= list_schedule_end(forward_costs(1, pairs, key_blocks), 132)
    ideal = pairs * sum(k + FORWARD_SETUP_STEPS for k in key_blocks) / 132
    assert chosen <= 1.02 * ideal + max(key_blocks)  # within a block of the perfect split


def test_the_gain_where_one_head_per_chunk_leaves_a_tail():
    """B1 H16 N4096 (16 pairs of 32 query blocks): the last head's longest blocks start last without chunks."""
    key_blocks = causal_key_blocks(4096, 4096, 128, 128)
    one = list_schedule_end(forward_costs(1, 16, key_blocks), 132)
    best = list_schedule_end(forward_costs(forward_chunk_heads(132, 16, key_blocks), 16, key_blocks), 132)
    assert best < 0.85 * one


def test_the_chunk_keeps_its_heads_k_and_v_within_the_l2_budget():
    key_blocks = causal_key_blocks(16384, 16384, 192, 128)
    kv_bytes = 2 * 16384 * 64 * 2  # K and V of one head, bf16 D64
    chunk = forward_chunk_heads(132, 32, key_blocks, kv_bytes)
    assert chunk * kv_bytes <= L2_BUDGET_BYTES
    assert forward_chunk_heads(132, 32, key_blocks, 10 * L2_BUDGET_BYTES) == 1


@pytest.mark.parametrize("chunk, pairs, blocks, causal", [(1, 5, 7, True), (2, 5, 7, True), (1, 40, 9, False),
                                                          (33, 256, 8, True), (1, 3, 2, True)])
def test_the_persistent_schedule_walks_every_tile_once(chunk, pairs, blocks, causal):
    """FwdBlocks.persistent's host schedule (chunks.forward_schedule, on the CPU sized for H100_SMS programs): every
    tile once, each program's tiles in the grid's order, min(tiles, SMs) programs, and the list schedule's end:
    no program's walk (costs) ends after the simulated hand-out of a grid's programs."""
    import torch

    from kernels.gluon.chunks import forward_schedule
    from kernels.gluon.scheduler import H100_SMS
    key_blocks = tuple(range(1, blocks + 1)) if causal else (blocks,) * blocks
    tiles, starts = forward_schedule(torch.device("cpu"), chunk, pairs, key_blocks, causal)
    tiles, starts = tiles.tolist(), starts.tolist()
    assert sorted(tiles) == list(range(pairs * blocks))
    assert len(starts) - 1 == min(pairs * blocks, H100_SMS) and starts[0] == 0 and starts[-1] == len(tiles)
    walks = [tiles[a:b] for a, b in zip(starts, starts[1:])]
    assert all(walk == sorted(walk) and walk for walk in walks)
    costs = forward_costs(chunk, pairs, key_blocks, causal)
    ends = [sum(costs[t] for t in walk) for walk in walks]
    assert max(ends) == list_schedule_end(costs, H100_SMS)
