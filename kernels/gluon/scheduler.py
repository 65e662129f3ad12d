"""The ws kernels' tile schedulers: which tile a program computes and which steps it walks, in the kernels
(`program_tiles`, `tile_at` -> a `Tile`; ws_dq's `dq_program` -> a `DqProgram`) and on the host (`chunk_heads`,
`query_steps`, `tile_schedule`; kernels.gluon.chunks chooses causal chunks by simulating the schedule).

ws (one tile = one key block of a (batch, kv head)): dense, tiles numbered in chunks of `chunk_heads` (batch, kv
head) pairs, key blocks in order within a chunk, the chunk's heads interleaved, so the tiles running at once share
their heads' Q, dO and dQ rows in L2 and, under causal masking (key block 0 walks the most query blocks), each chunk
starts its longest tiles first; PERSISTENT: one program per SM walks the host's `tile_schedule`; VARLEN (packed
documents): tile = pair * kv_heads + kv head, pairs (document, key block) from kernels.varlen.Packing.
ws_dq (one program = one query block of a (batch, head)): last query block first; VARLEN: (document, query
block) pairs, heaviest first.
"""
import functools

import torch

from kernels.common import cdiv
from kernels.gluon.compat import Value, aggregate, gl, gluon
from kernels.gluon.tiles import document_pair


def _value(x):
    """x as a Triton value (a literal or an argument specialized to 1 arrives as a plain int)."""
    return x if isinstance(x, Value) else gl.constexpr(x)


@aggregate
class TileSizes:
    """What `tile_at` reads: the problem's sizes (VARLEN: seq_q, seq_k the packed totals), batch_kv_heads = B * Hkv,
    chunk_heads (`chunk_heads`), and the packed documents' cu_seqlens CU_Q, CU_K and PAIRS [pairs, 2] int32."""
    seq_q: Value
    seq_k: Value
    heads: Value
    kv_heads: Value
    batch_kv_heads: Value
    chunk_heads: Value
    CU_Q: Value
    CU_K: Value
    PAIRS: Value

    def __init__(self, sizes, docs):
        self.seq_q = _value(sizes.seq_q)
        self.seq_k = _value(sizes.seq_k)
        self.heads = _value(sizes.heads)
        self.kv_heads = _value(sizes.kv_heads)
        self.batch_kv_heads = _value(sizes.batch_kv_heads)
        self.chunk_heads = _value(sizes.chunk_heads)
        self.CU_Q = _value(docs.cu_q)
        self.CU_K = _value(docs.cu_k)
        self.PAIRS = _value(docs.pairs)


@aggregate
class ProgramTiles:
    """This program's tiles: schedule numbers first .. end - 1 (PERSISTENT: TILES[first:end], the host's
    `tile_schedule`; else the program id alone)."""
    TILES: Value
    first: Value
    end: Value

    def __init__(self, TILES, first, end):
        self.TILES = _value(TILES)
        self.first = _value(first)
        self.end = _value(end)


@gluon.jit
def program_tiles(schedule, PERSISTENT: gl.constexpr):
    """schedule: a WsSchedule (TILES, TILE_STARTS) -> this program's ProgramTiles."""
    pid = gl.program_id(0)
    if PERSISTENT:
        first_tile = gl.load(schedule.tile_starts + pid)
        end_tile = gl.load(schedule.tile_starts + pid + 1)
    else:
        first_tile = pid
        end_tile = pid + 1
    return ProgramTiles(schedule.tiles, first_tile, end_tile)


@aggregate
class Tile:
    """One ws tile: key block start_n of kv head i_hk of batch (document) i_b, and its steps, m_blocks query blocks
    from m_lo for each of the group's query heads. seq_q, seq_k: its batch's (document's) lengths; q_row0, k_row0:
    its first rows in the [rows, heads, D] views of q and k; LSE / delta rows of query head i_h start at stats_row0 +
    i_h * stats_stride, dQ accumulator rows at acc_row0 + i_h * acc_stride."""
    i_b: Value
    i_hk: Value
    group: Value
    seq_q: Value
    seq_k: Value
    heads: Value
    kv_heads: Value
    start_n: Value
    m_lo: Value
    m_blocks: Value
    steps: Value
    q_row0: Value
    k_row0: Value
    stats_row0: Value
    stats_stride: Value
    acc_row0: Value
    acc_stride: Value
    BLOCK_M: gl.constexpr

    def __init__(self, i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo, m_blocks, steps, q_row0, k_row0,
                 stats_row0, stats_stride, acc_row0, acc_stride, BLOCK_M):
        self.i_b = _value(i_b)
        self.i_hk = _value(i_hk)
        self.group = _value(group)
        self.seq_q = _value(seq_q)
        self.seq_k = _value(seq_k)
        self.heads = _value(heads)
        self.kv_heads = _value(kv_heads)
        self.start_n = _value(start_n)
        self.m_lo = _value(m_lo)
        self.m_blocks = _value(m_blocks)
        self.steps = _value(steps)
        self.q_row0 = _value(q_row0)
        self.k_row0 = _value(k_row0)
        self.stats_row0 = _value(stats_row0)
        self.stats_stride = _value(stats_stride)
        self.acc_row0 = _value(acc_row0)
        self.acc_stride = _value(acc_stride)
        self.BLOCK_M = gl.constexpr(BLOCK_M)

    @gluon.jit
    def unmasked_run(self, BLOCK_N: gl.constexpr, CFG: gl.constexpr):
        """(lead, body_end): of each query head's m_blocks steps, [0, lead) cross the causal diagonal (or a right
        window edge), [body_end, m_blocks) hold queries past Nq, and [lead, body_end) need no mask (a key block past
        Nk: none). Without a left window edge (CFG.SPLIT_MASKED)."""
        right = 0 if CFG.CAUSAL else CFG.WINDOW_RIGHT  # -1: unbounded
        shift = self.seq_k - self.seq_q
        lead = 0
        if right >= 0:  # step i crosses while m_lo + i BM + shift + right < start_n + BN - 1
            lead = gl.maximum(gl.cdiv(self.start_n + BLOCK_N - 1 - shift - right - self.m_lo, self.BLOCK_M), 0)
            lead = gl.minimum(lead, self.m_blocks)
        body_end = self.m_blocks
        if self.m_lo + self.m_blocks * self.BLOCK_M > self.seq_q:  # the last block holds queries past Nq
            body_end = self.m_blocks - 1
        if self.start_n + BLOCK_N > self.seq_k:  # keys past Nk: every step masked
            lead = self.m_blocks
        return lead, gl.maximum(body_end, lead)

    @gluon.jit
    def query_block(self, step):
        """(query head, first query) of a step."""
        return self.i_hk * self.group + step // self.m_blocks, self.m_lo + (step % self.m_blocks) * self.BLOCK_M

    @gluon.jit
    def dq_row(self, i_h, start_m):
        """The fp32 accumulator's row of query start_m of head i_h: [B * H * dq_rows(Nq), D] (packed: [H * total_q,
        D])."""
        return self.acc_row0 + i_h * self.acc_stride + start_m

    @gluon.jit
    def stats_rows(self, i_h, o_m):
        """LSE / delta offsets of queries o_m of head i_h: [B, H, Nq] (packed: [1, H, total_q])."""
        return self.stats_row0 + i_h * self.stats_stride + o_m


@gluon.jit
def tile_at(k, program, sizes, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CFG: gl.constexpr):
    """The Tile numbered k (PERSISTENT: the program's k-th entry of TILES). program: ProgramTiles; sizes: TileSizes.
    The steps walk the query blocks that see the key block (from the first one reaching the causal diagonal, or a
    window's right edge, to the end, or to the last one inside a window's left edge) for each query head of the kv
    head's group in turn."""
    WINDOW_LEFT: gl.constexpr = CFG.WINDOW_LEFT
    WINDOW_RIGHT: gl.constexpr = CFG.WINDOW_RIGHT
    seq_q = sizes.seq_q
    seq_k = sizes.seq_k
    heads = sizes.heads
    kv_heads = sizes.kv_heads
    if CFG.PERSISTENT:
        tile = gl.load(program.TILES + k)
    else:
        tile = k
    if CFG.VARLEN:
        i_hk = tile % kv_heads
        i_b, i_n, q_row0, k_row0, doc_q, doc_k = document_pair(tile // kv_heads, sizes.PAIRS, sizes.CU_Q, sizes.CU_K)
        stats_row0 = q_row0  # LSE [1, H, total_q]; accumulator [H, total_q, D]
        stats_stride = seq_q
        acc_row0 = q_row0
        acc_stride = seq_q
        seq_q = doc_q
        seq_k = doc_k
    else:
        chunk_heads = sizes.chunk_heads
        key_blocks = gl.cdiv(seq_k, BLOCK_N)
        chunk = tile // (chunk_heads * key_blocks)
        in_chunk = tile % (chunk_heads * key_blocks)
        heads_here = gl.minimum(chunk_heads, sizes.batch_kv_heads - chunk * chunk_heads)  # the last chunk: short
        i_n = in_chunk // heads_here
        i_bhk = chunk * chunk_heads + in_chunk % heads_here
        i_b = i_bhk // kv_heads
        i_hk = i_bhk % kv_heads
        acc_rows = gl.cdiv(seq_q, 8) * 8  # dq_rows: [B * H * acc_rows, D]
        q_row0 = i_b * seq_q
        k_row0 = i_b * seq_k
        stats_row0 = i_b * heads * seq_q
        stats_stride = seq_q
        acc_row0 = i_b * heads * acc_rows
        acc_stride = acc_rows
    group = heads // kv_heads
    start_n = i_n * BLOCK_N
    shift = seq_k - seq_q  # bottom-right causal: query i sees key j iff j <= i + shift
    if CFG.CAUSAL:
        m_lo = gl.maximum(start_n - shift, 0) // BLOCK_M * BLOCK_M
    elif WINDOW_RIGHT >= 0:  # query i sees key j iff j <= i + shift + WINDOW_RIGHT
        m_lo = gl.maximum(start_n - shift - WINDOW_RIGHT, 0) // BLOCK_M * BLOCK_M
    else:
        m_lo = 0
    if WINDOW_LEFT >= 0:  # query i sees key j iff j >= i + shift - WINDOW_LEFT: the last one sees the block's last key
        m_end = gl.minimum(gl.maximum(start_n + BLOCK_N - shift + WINDOW_LEFT, 0), seq_q)
    else:
        m_end = seq_q
    m_blocks = gl.cdiv(gl.maximum(m_end - m_lo, 0), BLOCK_M)
    return Tile(i_b, i_hk, group, seq_q, seq_k, heads, kv_heads, start_n, m_lo, m_blocks, m_blocks * group, q_row0,
                k_row0, stats_row0, stats_stride, acc_row0, acc_stride, BLOCK_M)


@aggregate
class DqProgram:
    """ws_dq's program: query block start_m of head i_h (kv head i_hk) of batch (document) i_b, walking key_blocks
    key blocks (causal: up to its diagonal). seq_q, seq_k: its batch's (document's) lengths; q_row0, k_row0: its
    first rows in the q / k views; stats_row0: its head's first LSE / delta row."""
    i_b: Value
    i_h: Value
    i_hk: Value
    seq_q: Value
    seq_k: Value
    heads: Value
    kv_heads: Value
    start_m: Value
    key_blocks: Value
    q_row0: Value
    k_row0: Value
    stats_row0: Value

    def __init__(self, i_b, i_h, i_hk, seq_q, seq_k, heads, kv_heads, start_m, key_blocks, q_row0, k_row0,
                 stats_row0):
        self.i_b = _value(i_b)
        self.i_h = _value(i_h)
        self.i_hk = _value(i_hk)
        self.seq_q = _value(seq_q)
        self.seq_k = _value(seq_k)
        self.heads = _value(heads)
        self.kv_heads = _value(kv_heads)
        self.start_m = _value(start_m)
        self.key_blocks = _value(key_blocks)
        self.q_row0 = _value(q_row0)
        self.k_row0 = _value(k_row0)
        self.stats_row0 = _value(stats_row0)


@gluon.jit
def dq_program(sizes, docs, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
               VARLEN: gl.constexpr):
    """This program's DqProgram: query blocks last first, then (batch, head) pairs (VARLEN: program = pair * H +
    head, PAIRS[pair] = (document, query block)). sizes: (seq_q, seq_k, heads, kv_heads); docs: a WsDocs."""
    seq_q = sizes.seq_q
    seq_k = sizes.seq_k
    heads = sizes.heads
    kv_heads = sizes.kv_heads
    pid = gl.program_id(0)
    if VARLEN:
        i_h = pid % heads
        i_b, i_m, q_row0, k_row0, doc_q, doc_k = document_pair(pid // heads, docs.pairs, docs.cu_q, docs.cu_k)
        stats_row0 = i_h * seq_q + q_row0  # LSE [1, H, total_q]
        seq_q = doc_q
        seq_k = doc_k
    else:
        query_blocks = gl.cdiv(seq_q, BLOCK_M)
        i_m = query_blocks - 1 - pid // (gl.num_programs(0) // query_blocks)
        i_bh = pid % (gl.num_programs(0) // query_blocks)
        i_b = i_bh // heads
        i_h = i_bh % heads
        q_row0 = i_b * seq_q
        k_row0 = i_b * seq_k
        stats_row0 = i_bh * seq_q
    i_hk = i_h // (heads // kv_heads)
    start_m = i_m * BLOCK_M
    if CAUSAL:  # bottom-right: query i sees key j iff j <= i + Nk - Nq
        n_end = gl.minimum(gl.maximum(start_m + BLOCK_M + seq_k - seq_q, 0), seq_k)
    else:
        n_end = seq_k
    return DqProgram(i_b, i_h, i_hk, seq_q, seq_k, heads, kv_heads, start_m, gl.cdiv(n_end, BLOCK_N), q_row0, k_row0,
                     stats_row0)


def chunk_heads(device, seq_k: int, block_n: int, batch_kv_heads: int, longest_first: bool) -> int:
    """(batch, kv head) pairs per chunk of programs: about one wave of the GPU's SMs when longest_first (causal),
    else 1 (every head's key blocks in order)."""
    if not longest_first:
        return 1
    return max(1, min(batch_kv_heads, cdiv(sm_count(device), cdiv(seq_k, block_n))))


H100_SMS = 132  # what a compile check on a CPU (no GPU to ask) sizes the chunks for


@functools.cache
def sm_count(device) -> int:
    """The GPU's SM count (asked once per device), or H100_SMS off CUDA."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else H100_SMS


def query_steps(seq_q: int, seq_k: int, block_m: int, block_n: int, group: int, causal: bool,
                window_left: int = -1, window_right: int = -1) -> tuple:
    """Steps (query blocks x query heads of a kv head) of each key block, as `tile_at` counts them."""
    shift = seq_k - seq_q
    right = 0 if causal else window_right
    steps = []
    for start_n in range(0, seq_k, block_n):
        m_lo = max(start_n - shift - right, 0) // block_m * block_m if right >= 0 else 0
        m_end = min(max(start_n + block_n - shift + window_left, 0), seq_q) if window_left >= 0 else seq_q
        steps.append(cdiv(max(m_end - m_lo, 0), block_m) * group)
    return tuple(steps)


def tile_key_block(tile: int, key_blocks: int, batch_kv_heads: int, chunk_heads: int) -> int:
    """The key block of a tile numbered as `tile_at` numbers them (chunks of chunk_heads heads, key blocks in
    order)."""
    chunk, in_chunk = divmod(tile, chunk_heads * key_blocks)
    return in_chunk // min(chunk_heads, batch_kv_heads - chunk * chunk_heads)


TILE_SETUP_STEPS = 2  # what a tile costs beyond its steps (K, V, the dK, dV stores), in steps, for the schedule


def backward_costs(chunk: int, batch_kv_heads: int, steps: tuple) -> tuple:
    """ws's tiles' costs (steps + TILE_SETUP_STEPS) in the order `tile_at` numbers them (chunks of chunk pairs);
    steps: `query_steps`, one per key block."""
    key_blocks = len(steps)
    return tuple(steps[tile_key_block(tile, key_blocks, batch_kv_heads, chunk)] + TILE_SETUP_STEPS
                 for tile in range(key_blocks * batch_kv_heads))


def list_schedule(costs, slots: int) -> list:
    """Each slot's jobs (indices into costs, in order) when every job, in order, goes to the slot that frees first
    (the lowest-numbered on a tie): the hardware's hand-out of a non-persistent grid's programs to SMs, and the
    persistent programs' host schedules."""
    import heapq

    free_at = [(0, slot) for slot in range(min(slots, len(costs)))]  # (cost done, slot)
    walks = [[] for _ in free_at]
    for job, cost in enumerate(costs):
        done, slot = heapq.heappop(free_at)
        walks[slot].append(job)
        heapq.heappush(free_at, (done + cost, slot))
    return walks


def schedule_tensors(device, walks: list) -> tuple:
    """(tiles, tile_starts) int32 on device: program p walks tiles[tile_starts[p]:tile_starts[p + 1]]."""
    starts = [0]
    for walk in walks:
        starts.append(starts[-1] + len(walk))
    as_int32 = functools.partial(torch.tensor, dtype=torch.int32, device=device)
    return as_int32([t for walk in walks for t in walk]), as_int32(starts)


@functools.cache
def tile_schedule(device, key_blocks: int, batch_kv_heads: int, chunk_heads: int, steps: tuple):
    """(tiles, tile_starts) int32 on device: program p walks tiles[tile_starts[p]:tile_starts[p + 1]], numbered as
    `tile_at` numbers them. One program per SM; tiles go, in their order, to the program that frees first (as the
    hardware hands out the programs of a non-persistent grid), so the longest tiles start first under causal
    masking and the programs end together."""
    costs = backward_costs(chunk_heads, batch_kv_heads, steps)
    return schedule_tensors(device, list_schedule(costs, sm_count(device)))
