"""Block configs: one dataclass per design, with per-field validation that names the field and the rule.

Search space (runners.tune, docs/tuning.md): a field declares the values the tuner may try, in ONE place,
its dataclass field metadata, through `tunable`:

    BLOCK_M1: int = tunable(64, BLOCKS)          # default 64; the tuner tries 16, 32, 64, 128
    prescale: bool = tunable(False, BOOLS)       # booleans are categorical choices too
    deterministic: bool = False                  # plain field: never searched (a mode, not a speed knob)

`Blocks.search_space()` returns {field: candidates} of every declared field, in field order; the tuner
turns each into one categorical Optuna parameter. `tunable(..., kernel="_dq_kernel")` also names the kernel
(as the row's `kernel_ms` names it) whose time the field alone determines; `Blocks.field_kernels()` returns
them. A variant that launches independent kernels (two_pass) tags each kernel's fields, and the tuner then
runs one study per kernel (docs/tuning.md, "Per-kernel decomposition"); a field that changes several
kernels, or a single-kernel variant's fields, stay untagged. Candidates must each pass `validate()` alone; combination
rules (`check_rules`) may still reject a mix, which the tuner records as an invalid (unsupported) trial.
A new field (e.g. `tma`, `warp_specialize`) is searched by declaring it with `tunable(default, values)`;
nothing else needs to change. `conf/sweep_grid/blocks_<variant>.yaml` is a separate, smaller hand-picked
grid for `sweep=blocks` (and `runners.tune space=grid`), not derived from these declarations; a design without that
file gets every combination of its declared candidates as that grid (runners/schema.py `derived_grid`).
"""
import ast
from dataclasses import asdict, dataclass, field, fields

from kernels.gluon.config import named_handover_reason

NUM_WARPS = (1, 2, 4, 8, 16)
SEARCH = "search"  # dataclass field metadata key: the candidate values of a tunable field
KERNEL = "kernel"  # dataclass field metadata key: the kernel (a kernel_ms key) whose time the field determines
BLOCKS = (16, 32, 64, 128)  # tile candidates (256 rarely fits shared memory in the backward)
WARPS = (4, 8)
STAGES = (1, 2, 3, 4)
BOOLS = (False, True)


DKDV_KERNEL = "_dkdv_kernel"  # kernels/dkdv_dq.py's kernels, as kernel_ms names them
DQ_KERNEL = "_dq_kernel"
WS_DKDV_KERNEL = "_ws_backward_kernel"  # ws_two_pass's kernels (kernels/gluon/ws.py, ws_dq.py)
WS_DQ_KERNEL = "_ws_dq_kernel"


def tunable(default, values, kernel: str | None = None):
    """A block field with the candidate values runners.tune searches (`SEARCH` metadata) and, optionally,
    the one kernel whose time it determines (`KERNEL` metadata)."""
    metadata = {SEARCH: tuple(values)}
    if kernel is not None:
        metadata[KERNEL] = kernel
    return field(default=default, metadata=metadata)


def _is_pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and (x & (x - 1)) == 0


@dataclass(frozen=True)
class Blocks:
    """Base: no tunables (baselines). Subclasses add fields; every BLOCK_* is a power of two in [16, 256]."""

    @classmethod
    def from_dict(cls, values: dict | None, defaults: "Blocks | None" = None) -> "Blocks":
        """Overrides on top of defaults; an unknown field is a ValueError that lists the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = set(values or {}) - known
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}; known: {sorted(known)}")
        merged = {**(asdict(defaults) if defaults is not None else {}), **(values or {})}
        blocks = cls(**merged)
        blocks.validate()
        return blocks

    def as_dict(self) -> dict:
        """{field: value}, a fresh dict. The fields are read once per instance (a launch plan's blocks serve every
        call of its signature, variants/plan.py); the instance is frozen, so they cannot change after."""
        cached = self.__dict__.get("_as_dict")
        if cached is None:
            cached = asdict(self)
            object.__setattr__(self, "_as_dict", cached)
        return dict(cached)

    @classmethod
    def search_space(cls) -> dict:
        """{field: candidate values} of every field declared with `tunable`, in field order."""
        return {f.name: f.metadata[SEARCH] for f in fields(cls) if f.metadata.get(SEARCH)}

    @classmethod
    def field_kernels(cls) -> dict:
        """{field: the kernel whose time the field alone determines, or None}, every field in field order."""
        return {f.name: f.metadata.get(KERNEL) for f in fields(cls)}

    def validate(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.startswith("BLOCK_") and not (_is_pow2(value) and 16 <= value <= 256):
                raise ValueError(f"{f.name}={value}: must be a power of two in [16, 256]")
            if f.name.startswith("num_warps") and value not in NUM_WARPS:
                raise ValueError(f"{f.name}={value}: must be one of {NUM_WARPS}")
            if f.name.startswith("num_stages") and not (isinstance(value, int) and 1 <= value <= 8):
                raise ValueError(f"{f.name}={value}: must be an integer in [1, 8]")
            if f.type in (bool, "bool") and not isinstance(value, bool):
                raise ValueError(f"{f.name}={value!r}: must be true or false")
        self.check_rules()

    def check_rules(self) -> None:
        """Design-specific combination rules; raise ValueError naming the field and rule."""


@dataclass(frozen=True)
class TwoPassBlocks(Blocks):
    """Each of the two kernels has its own tile, warps and pipeline depth (their best differ)."""
    BLOCK_M1: int = tunable(64, BLOCKS, DKDV_KERNEL)  # dK/dV kernel: query block walked
    BLOCK_N1: int = tunable(64, BLOCKS, DKDV_KERNEL)  # dK/dV kernel: resident key block
    num_warps1: int = tunable(4, WARPS, DKDV_KERNEL)
    num_stages1: int = tunable(2, STAGES, DKDV_KERNEL)
    BLOCK_M2: int = tunable(64, BLOCKS, DQ_KERNEL)  # dQ kernel: resident query block
    BLOCK_N2: int = tunable(64, BLOCKS, DQ_KERNEL)  # dQ kernel: key block walked
    num_warps2: int = tunable(4, WARPS, DQ_KERNEL)
    num_stages2: int = tunable(2, STAGES, DQ_KERNEL)
    # causal: grid (heads, blocks), every head's longest blocks first; packed: heaviest (document, block) first
    longest_first: bool = tunable(False, BOOLS)
    prescale: bool = tunable(False, BOOLS)  # resident K (dK/dV kernel) and Q (dQ kernel) pre-multiplied by scale * log2(e)
    # the dK/dV kernel as two launches, a dV pass and a dK pass: one fp32 [BLOCK_N1, D] accumulator each instead of
    # two (large head dims, where two spill), for one more matmul (S recomputed: 14 -> 16 N^2 d)
    split_dkdv: bool = tunable(False, BOOLS, DKDV_KERNEL)
    # a head dim that is not a power of two held as two power-of-two register blocks in both kernels (192 = 128 + 64,
    # 96 = 64 + 32) instead of one padded to the next power of two (kernels.common.head_chunks)
    split_d: bool = tunable(False, BOOLS)


@dataclass(frozen=True)
class AtomicBlocks(Blocks):
    BLOCK_M: int = tunable(64, BLOCKS)  # query block walked
    BLOCK_N: int = tunable(64, BLOCKS)  # resident key block
    num_warps: int = tunable(4, WARPS)
    num_stages: int = tunable(2, STAGES)
    # A mode the user chooses (bitwise reproducibility), not a speed knob: never searched (fix it with
    # blocks.deterministic=true to tune the deterministic mode).
    deterministic: bool = False  # True: dQ by a second, atomic-free pass (bitwise reproducible, 10 -> 14 N^2 d)
    # causal: grid (heads, blocks), every head's longest blocks first; packed: heaviest (document, block) first
    longest_first: bool = tunable(False, BOOLS)


@dataclass(frozen=True)
class FusedBlocks(Blocks):
    BLOCK_M1: int = tunable(32, BLOCKS)  # dK/dV part: query block walked
    BLOCK_N1: int = tunable(64, BLOCKS)  # dK/dV part: resident key block
    BLOCK_M2: int = tunable(64, BLOCKS)  # dQ part: resident query block
    BLOCK_N2: int = tunable(32, BLOCKS)  # dQ part: key block walked
    BLK_SLICE_FACTOR: int = tunable(2, (1, 2, 4))  # the causal diagonal is walked in blocks of BLOCK_M1 (BLOCK_N2) / this
    prescale: bool = tunable(True, BOOLS)  # resident K (and Q) pre-multiplied by scale * log2(e)
    num_warps: int = tunable(4, WARPS)
    num_stages: int = tunable(2, STAGES)

    def check_rules(self) -> None:
        if not _is_pow2(self.BLK_SLICE_FACTOR):
            raise ValueError(f"BLK_SLICE_FACTOR={self.BLK_SLICE_FACTOR}: must be a power of two")
        for name in ("BLOCK_M1", "BLOCK_N2"):
            if getattr(self, name) // self.BLK_SLICE_FACTOR < 16:
                raise ValueError(f"{name}={getattr(self, name)}: {name} / BLK_SLICE_FACTOR "
                                 f"({self.BLK_SLICE_FACTOR}) must be >= 16 (tl.dot minimum)")



@dataclass(frozen=True)
class AtomicTmaBlocks(Blocks):
    BLOCK_M: int = 64  # query block walked
    BLOCK_N: int = 128  # resident key block
    num_warps: int = 8
    num_stages: int = 2
    tma_load: bool = True  # Q, dO, K, V tiles through tensor descriptors (falls back to pointer loads where impossible)
    tma_reduce: bool = True  # dQ tile added by one TMA reduce; false (or impossible): per-element relaxed atomics
    deterministic: bool = False  # True: dQ by a second, atomic-free pass (bitwise reproducible, 10 -> 14 N^2 d)
    # causal: grid (heads, blocks), every head's longest blocks first; packed: heaviest (document, block) first
    longest_first: bool = False
    warp_specialize: bool = False  # tl.range(warp_specialize=True) on the unmasked inner loop


def check_key_block(block_n: int, num_warps: int, swap_ab: bool) -> None:
    """The key-block rule of the Gluon dK/dV kernel (ws, ws_two_pass): one-line ValueError when it breaks."""
    if swap_ab and block_n % (16 * num_warps):
        raise ValueError(f"BLOCK_N={block_n}: must be a multiple of 16 x num_warps ({16 * num_warps}) with "
                         f"swap_ab=true: S^T rows are split over the warps")
    if not swap_ab and block_n % 64:
        raise ValueError(f"BLOCK_N={block_n}: must be a multiple of 64 with swap_ab=false (dK, dV rows: 16 per "
                         f"warp of a warpgroup)")


@dataclass(frozen=True)
class WsBlocks(Blocks):
    """ws (Gluon, sm90): S^T / dP^T [BLOCK_N, BLOCK_M] and dK / dV [BLOCK_N, D] are split by rows over the
    warpgroups (num_warps / 4), dQ [BLOCK_M, D] by rows, then by columns."""
    BLOCK_M: int = tunable(64, (64, 128))  # query block walked (Q, dO through the TMA ring)
    BLOCK_N: int = tunable(128, (64, 128))  # resident key block
    num_warps: int = tunable(8, WARPS)  # 4: one warpgroup, 8: two
    num_stages: int = tunable(2, (2, 3))  # depth of the Q / dO TMA ring
    # one warp issues the TMA loads and one the dQ reduce-adds, handing over through mbarriers; num_warps compute
    warp_specialize: bool = tunable(True, BOOLS)
    # S^T = K Q^T (keys on rows): P^T, dS^T feed dV, dK from registers, LSE / delta per column; false: S = Q K^T
    # (queries on rows; LSE / delta per row, so 128 x 128 tiles fit at D64): P and dS go through shared memory
    swap_ab: bool = tunable(True, BOOLS)
    # causal: programs in chunks of about one wave of heads, each chunk's longest key blocks (the first) first;
    # false: every head's key blocks in order, head after head
    longest_first: bool = True
    # one program per SM walking a schedule of tiles made on the host (longest first under causal masking): the
    # next tile's K, V load while this one's dK, dV are stored, and its first Q, dO blocks are already in the ring
    persistent: bool = tunable(False, BOOLS)
    # dQ by a second, atomic-free Gluon pass (ws_two_pass's dQ kernel at its default tile) instead of reduce-adds into
    # an fp32 buffer: the same bits on every run, 14 N^2 d of matmul instead of 10 (a mode, not a speed knob)
    deterministic: bool = False
    # issue 43: each step's S / dP wgmmas issued at the end of the step before, in flight through its dQ wait and
    # hand-over (the tensor pipe's idle tail); needs num_stages >= 2
    prefetch_scores: bool = tunable(False, BOOLS)
    # issue 43, swap_ab=false: dV += P^T dO issued as soon as P is in shared memory (a second CTA barrier), in flight
    # while dS is computed; ignored with swap_ab=true (P^T feeds dV from registers there already)
    early_dv: bool = tunable(False, BOOLS)
    # issue 43, swap_ab=false: P's shared tile over the dQ tile's bytes (P is written once the last step's dQ is
    # added): 32 KB free at D64 128 x 128, where a third Q / dO stage then fits (needs BLOCK_N <= 2 x the head dim)
    p_in_dq: bool = False
    # issue 43: D96's D-wide products (S, dP over D; dV, dK, dQ of D columns) in 64 + 32 head-dim chunks instead of
    # one 128-column chunk whose last 32 columns are zeros (kernels.gluon.tiles.head_dim_chunks); the shared tiles
    # stay 128 wide. A block rule refuses it at head dims it does not change (variants.ws: 64, 128, 192, 256)
    head_dim_split: bool = tunable(False, BOOLS)
    # issue 43, D192: each D-wide shared tile (and TMA box) as two, [rows, 128] + [rows, 64], instead of one 256
    # columns wide with 64 zero columns: 214 KB instead of 273 KB at two Q / dO stages (64 x 64, swap_ab=false;
    # results/h100/gluon/frontier_probe.md "D192 chunk tiles"). H100: 1.42-1.57x the one-stage default at 192 / 192
    # with two stages (now the default there), 0.94-0.96x at 192 / 128 (results/h100/gluon/ab_issue43/chunk_tiles192);
    # refused at head dims without two chunks of >= 64 columns (variants.ws)
    chunk_tiles: bool = tunable(False, BOOLS)
    # issue 43, GQA: programs per (key block, kv head), each walking 1 / group_split of the group's query heads (FA4
    # runs one per query head): more, shorter programs for the SMs, dK / dV as fp32 partials the host adds; must
    # divide H / Hkv (variants.ws refuses it elsewhere), 1 without GQA
    group_split: int = tunable(1, (1, 2, 4, 8))
    # with group_split > 1: the partials in fp32 (stores from registers); false: in the inputs' dtype through the
    # TMA stores (half the bytes, each partial rounded once more)
    fp32_partials: bool = tunable(True, BOOLS)
    # issue 43: the compute warps hand a step's dQ to the dQ warp by bar.arrive on a named barrier, the dQ warp
    # bar.syncs (FA3's hand-over, kernels.gluon.named), instead of one mbarrier arrive, which Gluon lowers with a
    # barrier of both warpgroups; needs num_warps=8, warp_specialize, p_in_dq=false. ~0.3 % on an H100 and an H200
    # (inside the noise): off
    named_handover: bool = tunable(False, BOOLS)
    # issue 43, swap_ab with warp_specialize (no effect otherwise): a step's LSE loaded from shared memory just before
    # P, delta just before dS, not both at the step's start: 32 + 32 registers fewer live at D64 with BLOCK_M=128,
    # where FA4's tile (128 x 128, S^T / dP^T swapped, P^T / dS^T from registers) then fits (12 B of spills, not 332)
    late_stats: bool = tunable(False, BOOLS)
    # issue 43, with dQ (no effect in ws_two_pass's dK/dV kernel): a step's dQ = dS K issued before dK += dS^T Q, so
    # the step waits for dQ with dK's wgmma still in flight through dQ's staging and hand-over (FA4's order); the dS
    # barrier then comes before dK's issue, not after it
    dq_first: bool = tunable(False, BOOLS)
    # issue 43, a masked problem (causal, a right window edge, lengths not a multiple of the tiles): each query head's
    # steps in runs, the leading ones across the diagonal, the unmasked middle, a query tail, the middle on a step
    # body compiled without the mask's branch (H100: D64 causal 1.007-1.040x; D128 causal with persistent,
    # late_stats, named_handover and dq_first 1.016-1.031x at N >= 4096, alone 0.95-0.96x;
    # results/h100/gluon/ab_issue43/split_masked); no effect with a left window edge or prefetch_scores
    split_masked: bool = tunable(False, BOOLS)
    # issue 43, causal (longest_first, dense): the (batch, kv head) pairs per chunk of tiles chosen by simulating the
    # list schedule the hardware (or persistent=true's host schedule) runs, within 32 MB of L2 for the chunk's Q, dO
    # and dQ rows (kernels.gluon.chunks.backward_chunk_heads), instead of about one wave: the simulation leaves
    # 0.2-2 % past the perfect split on the FA grid's causal cells at N 1k / 4k where one wave leaves 2.6-7.8 %
    scheduled_chunks: bool = tunable(False, BOOLS)

    def check_rules(self) -> None:
        if self.named_handover and (reason := named_handover_reason(self.num_warps, self.warp_specialize,
                                                                     self.p_in_dq, self.deterministic)):
            raise ValueError(reason)
        if self.group_split < 1:
            raise ValueError(f"group_split={self.group_split}: must be >= 1")
        if self.group_split > 1 and self.deterministic:
            raise ValueError("group_split > 1: needs deterministic=false (the dK/dV partials are added by ws's "
                             "atomic path)")
        if self.num_warps not in WARPS:
            raise ValueError(f"num_warps={self.num_warps}: must be 4 or 8 (whole warpgroups)")
        if self.p_in_dq and (self.swap_ab or self.deterministic):
            raise ValueError("p_in_dq=true: needs swap_ab=false (P in shared memory) and deterministic=false "
                             "(a dQ tile)")
        if self.prefetch_scores and self.num_stages < 2:
            raise ValueError(f"prefetch_scores=true: needs num_stages >= 2 (the next step's Q / dO is waited for "
                             f"before this step's stage goes back), got {self.num_stages}")
        if self.deterministic and not self.warp_specialize:
            raise ValueError("deterministic=true: needs warp_specialize=true (the dK/dV kernel without dQ)")
        if self.BLOCK_M < 64:
            raise ValueError(f"BLOCK_M={self.BLOCK_M}: must be >= 64 (dQ's wgmma needs a 64-row warpgroup tile)")
        check_key_block(self.BLOCK_N, self.num_warps, self.swap_ab)
        if self.num_stages < 1:
            raise ValueError(f"num_stages={self.num_stages}: must be >= 1 (the Q / dO ring's stages)")


@dataclass(frozen=True)
class WsTwoPassBlocks(Blocks):
    """dK/dV kernel (ws's, without dQ): BLOCK_M, BLOCK_N, num_warps, num_stages, swap_ab, persistent, longest_first;
    dQ kernel: BLOCK_M2 (resident query block), BLOCK_N2 (key block walked), num_warps2, num_stages2."""
    BLOCK_M: int = tunable(64, (64, 128), WS_DKDV_KERNEL)
    BLOCK_N: int = tunable(128, (64, 128), WS_DKDV_KERNEL)
    num_warps: int = tunable(8, WARPS, WS_DKDV_KERNEL)
    num_stages: int = tunable(2, (2, 3), WS_DKDV_KERNEL)
    swap_ab: bool = tunable(True, BOOLS, WS_DKDV_KERNEL)
    longest_first: bool = True
    persistent: bool = tunable(False, BOOLS, WS_DKDV_KERNEL)
    BLOCK_M2: int = tunable(128, (64, 128), WS_DQ_KERNEL)
    BLOCK_N2: int = tunable(64, (64, 128), WS_DQ_KERNEL)
    num_warps2: int = tunable(8, WARPS, WS_DQ_KERNEL)
    num_stages2: int = tunable(2, (2, 3), WS_DQ_KERNEL)
    # issue 43: D96's D-wide products, in both kernels, in 64 + 32 head-dim chunks instead of one 128-column chunk
    # whose last 32 columns are zeros (kernels.gluon.tiles.head_dim_chunks); the shared tiles stay 128 wide. A block
    # rule refuses it at head dims it does not change (variants.ws: 64, 128, 192, 256)
    head_dim_split: bool = tunable(False, BOOLS)
    # issue 43, D192: the dK/dV kernel's D-wide shared tiles as two per tensor, 128 + 64 columns (WsBlocks.chunk_tiles)
    chunk_tiles: bool = False
    # issue 43, both kernels: the dK/dV kernel's masked and unmasked steps in loops of their own (WsBlocks.split_masked),
    # and the dQ kernel's key blocks that no row needs masked in a loop without the mask; GPU tests pass (H100,
    # eb39e7f), not yet timed
    split_masked: bool = tunable(False, BOOLS)
    # issue 43, causal: the dK/dV kernel's tile chunks from a simulated list schedule (WsBlocks.scheduled_chunks)
    scheduled_chunks: bool = tunable(False, BOOLS)

    def check_rules(self) -> None:
        for warps, name in ((self.num_warps, "num_warps"), (self.num_warps2, "num_warps2")):
            if warps not in WARPS:
                raise ValueError(f"{name}={warps}: must be 4 or 8 (whole warpgroups)")
        if self.BLOCK_M < 64:
            raise ValueError(f"BLOCK_M={self.BLOCK_M}: must be >= 64 (a 64-row warpgroup tile)")
        check_key_block(self.BLOCK_N, self.num_warps, self.swap_ab)
        if self.BLOCK_M2 % (16 * self.num_warps2):
            raise ValueError(f"BLOCK_M2={self.BLOCK_M2}: must be a multiple of 16 x num_warps2 "
                             f"({16 * self.num_warps2}): dQ rows are split over the warps")
        if self.num_stages < 2 or self.num_stages2 < 2:
            raise ValueError("num_stages, num_stages2: must be >= 2 (TMA rings)")

    def dq_tile(self) -> dict:
        """The dQ kernel's fields under `ws_dq`'s names."""
        return dict(BLOCK_M=self.BLOCK_M2, BLOCK_N=self.BLOCK_N2, num_warps=self.num_warps2,
                    num_stages=self.num_stages2)

    @classmethod
    def dq_tile_for(cls, head_dim: int) -> dict:
        """The dQ kernel's default tile for a head dim (ws's deterministic mode), as ws_two_pass's rules give it
        (conf/block_defaults.yaml): the dataclass's up to D128; past it (tiles of 256 columns) 128 x 32 on two
        warpgroups at D192, 64 x 64 on one at D256, so Q, dO and a 2-stage K / V ring fit shared memory."""
        if head_dim <= 128:
            return cls().dq_tile()
        if head_dim <= 192:
            return dict(BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=2)
        return dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)


def blocks_text(blocks) -> str:
    """Block overrides (None, a dict, or a design's Blocks) as the op's string argument, 'name=repr;...' in name order
    ('' = none). Plain string formatting, so that torch.compile traces it (json.dumps breaks the graph)."""
    if blocks is None:
        return ""
    if hasattr(blocks, "__dataclass_fields__"):
        blocks = {name: getattr(blocks, name) for name in blocks.__dataclass_fields__}
    if not isinstance(blocks, dict):
        raise ValueError(f"blocks must be a dict or a Blocks, got {type(blocks).__name__}")
    return ";".join(f"{name}={blocks[name]!r}" for name in sorted(blocks))


def blocks_from_text(text: str) -> dict | None:
    """blocks_text's inverse: {name: int / bool / str value}, or None for ''."""
    if not text:
        return None
    pairs = (item.split("=", 1) for item in text.split(";"))
    return {name: ast.literal_eval(value) for name, value in pairs}
