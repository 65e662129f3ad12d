"""The causal programs' chunks, chosen on the host by simulating the list schedule the hardware runs (it hands a
grid's programs out in order to the SM that frees first; ws's persistent host schedule, `scheduler.tile_schedule`,
does the same). Causal programs differ in length, so the order decides the tail: ws's tiles come in chunks of
(batch, kv head) pairs, each chunk's longest first (`scheduler.tile_at`), the Gluon forward's programs in chunks of
(batch, head) pairs with FwdBlocks.lpt (`forward_parts._program_rows`, its host copy `forward_program`). Of a few
candidate chunks, the one whose simulated schedule ends first, within an L2 budget for the rows a chunk shares:
`backward_chunk_heads` (ws's `scheduled_chunks`), `forward_chunk_heads` (the forward's `lpt`)."""
import functools
import heapq

from kernels.common import cdiv
from kernels.gluon.scheduler import backward_costs, list_schedule, schedule_tensors, sm_count

L2_BUDGET_BYTES = 32 << 20  # of an H100's / H200's 50 MB L2: the rows a chunk's programs share (K, V; Q, dO, dQ)
FORWARD_SETUP_STEPS = 1  # what a forward program costs beyond its key blocks (Q in, O and the LSE out), in key blocks


def causal_key_blocks(seq_q: int, seq_k: int, block_m: int, block_n: int) -> tuple:
    """Key blocks each query block of the causal Gluon forward walks (bottom-right diagonal, at least 1), by query
    block: what `forward_parts._program_rows` counts."""
    return window_key_blocks(seq_q, seq_k, block_m, block_n, -1, 0)


def window_key_blocks(seq_q: int, seq_k: int, block_m: int, block_n: int, left: int, right: int) -> tuple:
    """Key blocks each query block of the Gluon forward walks under a window bottom-right aligned as the causal
    diagonal (query i sees key j iff i + Nk - Nq - left <= j <= i + Nk - Nq + right; -1: unbounded; causal: right
    0), from the block of its first visible key, at least 1, by query block: what `forward_parts._program_rows`
    counts."""
    shift, counts = seq_k - seq_q, []
    for start in range(0, seq_q, block_m):
        end = min(max(start + block_m + shift + right, 0), seq_k) if right >= 0 else seq_k
        first = 0
        if left >= 0:
            first = min(max(start + shift - left, 0) // block_n * block_n, max(end - 1, 0) // block_n * block_n)
        counts.append(max(cdiv(end - first, block_n), 1))
    return tuple(counts)


def list_schedule_end(costs, slots: int) -> int:
    """When the last of jobs `costs` (in order) ends, each started on the slot that frees first: the hardware's
    hand-out of a grid's programs, one program per SM."""
    free = [0] * min(slots, len(costs))
    for cost in costs:
        heapq.heapreplace(free, free[0] + cost)
    return max(free, default=0)


def forward_program(pid: int, chunk_heads: int, batch_heads: int, query_blocks: int, causal: bool) -> tuple:
    """(batch-head pair, query block) of the Gluon forward's program pid: the host's copy of
    kernels.gluon.forward_parts._program_rows' numbering (chunks of chunk_heads pairs, the last one short; in a chunk
    by query block, its heads fastest; causal: the last query block first)."""
    chunk, in_chunk = divmod(pid, chunk_heads * query_blocks)
    heads_here = min(chunk_heads, batch_heads - chunk * chunk_heads)
    i_m = in_chunk // heads_here
    return chunk * chunk_heads + in_chunk % heads_here, query_blocks - 1 - i_m if causal else i_m


def forward_costs(chunk: int, batch_heads: int, key_blocks: tuple, causal: bool = True) -> tuple:
    """The programs' costs (key blocks + FORWARD_SETUP_STEPS) in the order the grid numbers them; key_blocks: each
    query block's (`causal_key_blocks`; not causal, every block's the same)."""
    blocks = len(key_blocks)
    return tuple(key_blocks[forward_program(pid, chunk, batch_heads, blocks, causal)[1]] + FORWARD_SETUP_STEPS
                 for pid in range(batch_heads * blocks))


@functools.cache
def forward_schedule(device, chunk: int, batch_heads: int, key_blocks: tuple, causal: bool) -> tuple:
    """(tiles, tile_starts) int32 on device for the persistent Gluon forward (FwdBlocks.persistent): one program
    per SM, walking tiles[tile_starts[p]:tile_starts[p + 1]], numbered as `forward_program` numbers the
    programs of a grid, each in turn to the program that frees first (`list_schedule`, the costs
    `forward_costs`)."""
    costs = forward_costs(chunk, batch_heads, key_blocks, causal)
    return schedule_tensors(device, list_schedule(costs, sm_count(device)))


def _best_chunk(pairs: int, blocks: int, slots: int, pair_bytes: int, costs, prefer: int | None = None) -> int:
    """Of the candidate chunks (1, powers of two, about 1-4 waves of `slots` programs of `blocks` per pair, every
    pair; at most L2_BUDGET_BYTES of the chunk's pairs' rows, pair_bytes: one pair's, 0: no cap), the one whose
    list schedule (`list_schedule_end` of costs(chunk)) ends first; on a tie `prefer` (within the cap), then the
    smallest."""
    largest = min(pairs, max(1, L2_BUDGET_BYTES // pair_bytes)) if pair_bytes else pairs
    prefer = None if prefer is None else max(1, min(largest, prefer))
    candidates = {1, largest}
    candidates.update(1 << k for k in range(largest.bit_length()))
    candidates.update(cdiv(waves * slots, blocks) for waves in range(1, 5))
    ends = {chunk: list_schedule_end(costs(chunk), slots)
            for chunk in sorted(c for c in candidates if 1 <= c <= largest)}
    return min(ends, key=lambda chunk: (ends[chunk], chunk != prefer, chunk))


@functools.cache
def forward_chunk_heads(slots: int, batch_heads: int, key_blocks: tuple, kv_bytes: int = 0) -> int:
    """(batch, head) pairs per chunk of the causal Gluon forward's programs with FwdBlocks.lpt. One chunk (every
    head) is LPT order, the list schedule's best against the tail, but the programs running at once then belong to
    many heads, whose K and V do not share L2; one head per chunk (the order without lpt) starts the last heads'
    longest query blocks last. `_best_chunk` of the programs' costs (`forward_costs`: a query block's key blocks
    plus FORWARD_SETUP_STEPS), the smallest on a tie, kv_bytes: one head's K and V (0: no cap). key_blocks:
    `causal_key_blocks`."""
    return _best_chunk(batch_heads, len(key_blocks), slots, kv_bytes,
                       lambda chunk: forward_costs(chunk, batch_heads, key_blocks))


@functools.cache
def backward_chunk_heads(slots: int, batch_kv_heads: int, steps: tuple, pair_bytes: int = 0) -> int:
    """(batch, kv head) pairs per chunk of ws's causal tiles (longest_first): `_best_chunk` of the tiles' costs
    (`backward_costs`: a tile's steps + TILE_SETUP_STEPS, in `tile_at`'s order; the hardware's hand-out of a grid's
    programs, and what `tile_schedule` does for persistent programs), on a tie `scheduler.chunk_heads`' one wave,
    then the smallest; pair_bytes: one pair's Q, dO and fp32 dQ rows (0: no cap). One wave alone left the simulated
    schedule 2.6-7.8 % past the perfect split on the FA grid's causal cells at N 1k / 4k (tests/test_ws_schedule.py).
    steps: `query_steps`."""
    key_blocks = len(steps)
    return _best_chunk(batch_kv_heads, key_blocks, slots, pair_bytes,
                       lambda chunk: backward_costs(chunk, batch_kv_heads, steps), prefer=cdiv(slots, key_blocks))
