"""The Gluon forward's structural variants by name (issue 42), for A/B runs in one process (scripts/forward_bench.py
--variants, tests/test_gluon_forward.py): each is a FwdBlocks made from the default tile of a head dim.

    mono        kernels/gluon/forward.py: one compute partition of 8 warps (both warpgroups in lockstep), the
                intra-warpgroup overlap, P as a register operand (the default)
    ws2         kernels/gluon/forward_pp.py: two consumer partitions of one warpgroup each (64 rows), free-running
    pp2         ws2 with ping-pong: the consumers take turns issuing their wgmmas (FA3 §3.1)
    pp2_serial  pp2 without the intra-warpgroup overlap (S, softmax, PV in turn): the overlap's A/B
    pp3         three ping-pong consumers, 192 query rows (FA3's D64 tile; 160 registers each: tile D <= 64 only)
    pp2_lazy    pp2 with FA4's conditional rescale (FwdBlocks.lazy_rescale: O *= alpha only when a row's max grew
                by more than 2^8; a stale max otherwise, exact at the end)
    pp3_lazy    pp3 with the conditional rescale (tile D <= 64 only)
    pp2_lazy_split, pp3_split  pp2_lazy / pp3 with the key blocks left of the causal diagonal (and inside Nk) in a
                loop of their own, compiled without the mask (FwdBlocks.split_masked; issue 43's split_masked, the
                backward's 1.007-1.040x at D64 causal); lose on an H100 (results/h100/forward_split)
    pp2_lazy_lpt, pp3_lpt  pp2_lazy / pp3 with causal programs in chunks of heads, each chunk's query blocks longest
                first across its heads (FwdBlocks.lpt; the chunk chosen on the host by a list-scheduling simulation,
                kernels.gluon.chunks.forward_chunk_heads): pp3_lpt beats pp3 on every FA-grid causal cell, pp2_lazy_lpt
                beats pp2_lazy at N4096 and ties at N16384 but loses 0.4-4 % at N 1k / 2k (H100 and H200, two
                passes in either order: results/h100|h200/forward_lpt)
    pp2_lazy_persistent, pp3_persistent  pp2_lazy_lpt / pp3_lpt with one program per SM walking the host's list
                schedule of the tiles (FwdBlocks.persistent: chunks.forward_schedule), each tile's first K / V loaded
                while the consumers finish the last tile; compile-checked, not yet run on a GPU
    pp3_persistent_dsum  pp3_persistent with the row sum l kept as per-thread partials (FwdBlocks.deferred_sum: [64, 8]
                a consumer, reduced across each row's 4 lanes once, in the epilogue, as FA3 / FA4's softmax does):
                what forward=gluon runs at D64 causal. H200, two passes in either order (results/h200/forward_dsum):
                1.006-1.012x pp3_persistent causal (N4096, N16384), 0.995-1.004x non-causal; pp2_lazy_lpt with it at
                D128 0.979-1.002x (removed). FA3 scheduler-barrier turns (named_turns) lost 0.94-0.95x at D64
                non-causal, 0.98-1.00x at D128, and were removed (the code is in cf5fbfc)
    pp2_serial_n256  pp2_serial with 256 keys per step (half the steps, each S a 64 x 256 wgmma; tile D <= 64 only,
                3 stages of K and V, 208 KB of shared memory; with the overlap S_j and P_{j-1} spill past 240 registers)
"""
from typing import NamedTuple

from kernels.gluon.forward import FwdBlocks, default_forward_blocks
from kernels.gluon.tiles import tile_dim

# <name>_<suffix>: a preferred variant with one more FwdBlocks field (issue 42's leads from the H200 profile)
SUFFIX_FIELDS = {"dsum": "deferred_sum"}
SUFFIXED_OF = ("pp3_persistent",)
FORWARD_VARIANTS = ("mono", "ws2", "pp2", "pp2_serial", "pp3", "pp2_serial_n256", "pp2_lazy", "pp3_lazy",
                    "pp2_lazy_split", "pp3_split", "pp2_lazy_lpt", "pp3_lpt", "pp2_lazy_persistent", "pp3_persistent",
                    *(f"{name}_{suffix}" for name in SUFFIXED_OF for suffix in SUFFIX_FIELDS))


class Preferred(NamedTuple):
    largest_tile: int  # tile D up to which the rule holds
    seq_k_min: int  # and from this many keys on
    name: str  # the variant forward=gluon / auto runs there
    causal: bool | None = None  # only for causal (True) or non-causal (False) problems; None: both


# what forward=gluon / auto runs, the first rule that holds (mono past D128: pp2 there is GPU-tested but not yet
# timed). Measured on an H100 at N4096 bf16 (results/h100/gpu_tests_2026-11-26): pp3 / pp2 beat mono by 21-37 %; at
# D128 N4096 / N16384 bf16 (results/h100/gluon/forward_lazy_h100x4.txt) pp2_lazy beats pp2 (623.5 / 540.5 causal /
# 669.5 / 626.4 against 620.4 / 530.7 / 628.4 / 625.3 TFLOPS), while at D64 pp3_lazy loses to pp3 (469.7 / 348.3
# against 487.5 / 412.3). lpt (causal only; the same programs otherwise): pp3_lpt / pp3 1.008-1.11 on the H100,
# 1.014-1.114 on the H200 (FA grid N 1k-16k); pp2_lazy_lpt / pp2_lazy 1.034-1.038 at N4096, 1.001-1.004 at N16384,
# but 0.96-0.97 at N1024 (H100) and 0.991-0.996 at N2048 (H200) (results/h100|h200/forward_lpt). Persistent (one
# program per SM walking a list schedule), H100 (results/h100/forward_persistent): pp3_persistent / pp3_lpt 1.19
# (N1024 causal), 1.06 (N1024), 1.12 / 1.04 (N2048), 1.02 (N4096, N8192), 1.00-1.01 (N16384); pp2_lazy_persistent /
# pp2_lazy 1.05-1.12 at N1024. Without spills (tiles.fresh_arange; results/h100/forward_persistent/spill_free), D128
# pp2_lazy_persistent / pp2_lazy_lpt causal: 1.06-1.12 (N2048), 1.02 (N4096), 1.01 (N8192), 1.00 (N16384);
# non-causal 1.00 (N2048), 0.98 (N4096), 0.97 (N8192), 0.96 (N16384). deferred_sum at D64 causal: see
# pp3_persistent_dsum above (results/h200/forward_dsum)
PREFERRED = (Preferred(64, 0, "pp3_persistent_dsum", causal=True), Preferred(64, 0, "pp3_persistent"),
             Preferred(128, 16384, "pp2_lazy_lpt"),
             Preferred(128, 4096, "pp2_lazy_lpt", causal=False), Preferred(128, 0, "pp2_lazy_persistent"))
# the variants with no tile past tile D 64
D64_ONLY = ("pp3", "pp2_serial_n256", "pp3_lazy", "pp3_split", "pp3_lpt", "pp3_persistent",
            *(f"pp3_persistent_{suffix}" for suffix in SUFFIX_FIELDS))


def preferred_name(head_dim: int, causal: bool, seq_k: int = 0) -> str:
    """The variant the Gluon forward runs by default at this head dim, masking and key count (PREFERRED, else
    mono)."""
    return next((rule.name for rule in PREFERRED if tile_dim(head_dim) <= rule.largest_tile
                 and seq_k >= rule.seq_k_min and rule.causal in (None, causal)), "mono")


def preferred_blocks(head_dim: int, causal: bool, seq_k: int = 0) -> FwdBlocks:
    """The tile and structure the Gluon forward runs by default at this head dim and key count."""
    return variant_blocks(preferred_name(head_dim, causal, seq_k), head_dim, causal)


def variant_blocks(name: str, head_dim: int, causal: bool) -> FwdBlocks | None:
    """The variant's tile at this head dim, or None where it does not apply (D64_ONLY past tile D 64)."""
    base = default_forward_blocks(head_dim, causal)
    plain, _, suffix = name.rpartition("_")
    if plain in SUFFIXED_OF and suffix in SUFFIX_FIELDS:
        blocks = variant_blocks(plain, head_dim, causal)
        return blocks and blocks._replace(**{SUFFIX_FIELDS[suffix]: True})
    if name == "mono":
        return base
    if name in D64_ONLY and tile_dim(head_dim) > 64:
        return None
    if name in ("pp3", "pp3_lazy", "pp3_split", "pp3_lpt", "pp3_persistent"):
        return FwdBlocks(192, base.BLOCK_N, 4, base.num_stages, 3, True, True, lazy_rescale=name == "pp3_lazy",
                         split_masked=name == "pp3_split", lpt=name in ("pp3_lpt", "pp3_persistent"),
                         persistent=name == "pp3_persistent")
    if name == "pp2_serial_n256":
        return FwdBlocks(128, 256, 4, 3, 2, overlap=False, pingpong=True)
    two = FwdBlocks(128, base.BLOCK_N, 4, base.num_stages, consumers=2)
    if name == "ws2":
        return two
    if name == "pp2":
        return two._replace(pingpong=True)
    if name == "pp2_lazy":
        return two._replace(pingpong=True, lazy_rescale=True)
    if name == "pp2_lazy_lpt":
        return two._replace(pingpong=True, lazy_rescale=True, lpt=True)
    if name == "pp2_lazy_persistent":
        return two._replace(pingpong=True, lazy_rescale=True, lpt=True, persistent=True)
    if name == "pp2_lazy_split":
        return two._replace(pingpong=True, lazy_rescale=True, split_masked=True)
    if name == "pp2_serial":
        return two._replace(pingpong=True, overlap=False)
    raise ValueError(f"gluon forward variant {name!r}: one of {', '.join(FORWARD_VARIANTS)}")
