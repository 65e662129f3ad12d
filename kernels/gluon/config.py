"""The ws kernels' compile-time switches as one record (`WsConfig`), made on the host and passed whole as the
kernel's CFG constexpr: each role reads the switches it needs by name (`CFG.CAUSAL`, `CFG.STAGES`), so adding a
switch is one field here and one `make_config` argument, not an edit of every signature."""
from typing import NamedTuple


class WsConfig(NamedTuple):  # hashable: Triton specializes the kernel on it like on any constexpr
    DIM: int  # the data's head dim (the tiles have tile_dim(DIM) columns)
    D_MAIN: int  # its head-dim chunks (kernels.gluon.tiles.head_dim_chunks): D_REST = 0 for one chunk
    D_REST: int
    STAGES: int  # depth of the Q / dO ring (ws_dq's kernel: of the K / V ring)
    CAUSAL: bool  # bottom-right causal mask
    WINDOW_LEFT: int  # sliding window edges, -1 = unbounded (variants.problem.window_pair); causal: RIGHT = -1
    WINDOW_RIGHT: int
    SOFTCAP: float  # > 0: scores s -> SOFTCAP * tanh(s / SOFTCAP)
    MASKED: bool  # causal, windowed, packed, or a sequence not a multiple of its block: some block needs the mask
    WARP_SPECIALIZE: bool  # a load warp and a dQ warp beside the compute warps (else one partition issues all)
    SWAP_AB: bool  # S^T = K Q^T (P^T, dS^T as register A operands), else S = Q K^T with P, dS in shared memory
    PERSISTENT: bool  # one program per SM walking a host-made schedule (kernels.gluon.scheduler.tile_schedule)
    VARLEN: bool  # packed documents (kernels.varlen.Packing)
    WITH_DQ: bool = True  # False: ws_two_pass's dK/dV kernel (no dQ, no dQ warp)
    PREFETCH: bool = False  # the next step's S / dP wgmmas issued before this step's tail (dQ wait and hand-over)
    EARLY_DV: bool = False  # not SWAP_AB: dV += P^T dO issued once P is in shared memory, before dP is waited
    P_IN_DQ: bool = False  # not SWAP_AB: P's tile over the dQ tile's bytes (a stage's worth of shared memory freed)
    # issue 47: V's head dim (V, dO, dV tiles: MLA's 128 beside D 192) and its chunks, as DIM / D_MAIN / D_REST
    # (make_config: DIM's when V has the same)
    DIM_V: int = 0
    DV_MAIN: int = 0
    DV_REST: int = 0
    # D192 chunk tiles: each D-wide (Dv-wide) shared tile and TMA box is two, [rows, D_MAIN] + [rows, D_REST], so no
    # zero columns sit in shared memory (a second Q / dO stage fits at 192 / 192); CHUNK_TILES_V: V's, dO's, dV's
    CHUNK_TILES: bool = False
    CHUNK_TILES_V: bool = False
    # issue 43, group_split: each kv head's query heads walked by GROUP_SPLIT programs per key block (tile kv head
    # i_hk reads K / V head i_hk // GROUP_SPLIT); dK and dV leave as partials, one per slice (kernels.partials adds
    # them): FP32_PARTIALS by stores from registers, else in K's dtype through K's / V's shared tiles as always
    GROUP_SPLIT: int = 1
    FP32_PARTIALS: bool = False
    # issue 43: the compute warps hand a step's dQ to the dQ warp by bar.arrive on a named barrier (kernels.gluon.named:
    # no partition-wide barrier) instead of one mbarrier arrive (WARP_SPECIALIZE, WITH_DQ, two warpgroups)
    NAMED_HANDOVER: bool = False
    # issue 43, SWAP_AB with WARP_SPECIALIZE: a step's LSE loaded from its shared tile just before P, delta just before
    # dS, instead of both at the step's start (fewer live registers: D64's 128 x 128 swap-AB tiles fit)
    LATE_STATS: bool = False
    # issue 43, with dQ: a step's dQ = dS K issued before dK += dS^T Q (after the dS barrier), so dQ is waited for
    # with dK still in flight and dK's wgmma runs through the dQ tile's staging and hand-over (FA4's order)
    DQ_FIRST: bool = False
    # issue 43, MASKED without a left window edge: each query head's steps in three runs, the leading ones that cross
    # the causal diagonal (or a right window edge), the unmasked middle and a query tail (Tile.unmasked_run), walked
    # by two compiled step bodies: the middle's without the mask's runtime branch, the other two runs' with it
    SPLIT_MASKED: bool = False


def make_config(*, head_dim: int, d_main: int, d_rest: int, stages: int, causal: bool, window_left: int = -1,
                window_right: int = -1, softcap: float = 0.0, masked: bool, warp_specialize: bool = True,
                swap_ab: bool = True, persistent: bool = False, varlen: bool = False,
                with_dq: bool = True, prefetch: bool = False, early_dv: bool = False,
                p_in_dq: bool = False, head_dim_v: int | None = None, dv_main: int = 0,
                dv_rest: int = 0, chunk_tiles: bool = False, group_split: int = 1,
                fp32_partials: bool = False, named_handover: bool = False, late_stats: bool = False,
                dq_first: bool = False, split_masked: bool = False) -> WsConfig:
    """The record from the launch's values (window_right is dropped under causal masking: the diagonal bounds it).
    head_dim_v (with its chunks dv_main, dv_rest): V's head dim; None = head_dim's (its chunks too). chunk_tiles: the
    tiles of a head dim with two chunks as two tiles each (one chunk: nothing to split). group_split: programs per
    kv head's query heads (dK / dV partials; fp32_partials: fp32 ones by register stores). named_handover: the dQ
    hand-over by a named barrier (only with warp specialization and dQ). late_stats: LSE / delta loaded at their use
    (only with swap AB and warp specialization). dq_first: dQ's wgmma before dK's (only with dQ). split_masked: the
    masked and unmasked steps in loops of their own (only where some block is masked, without a left window edge and
    without prefetch)."""
    if head_dim_v is None:
        head_dim_v, dv_main, dv_rest = head_dim, d_main, d_rest
    return WsConfig(DIM=head_dim, D_MAIN=d_main, D_REST=d_rest, STAGES=stages, CAUSAL=causal,
                    WINDOW_LEFT=window_left, WINDOW_RIGHT=-1 if causal else window_right, SOFTCAP=float(softcap),
                    MASKED=masked, WARP_SPECIALIZE=warp_specialize, SWAP_AB=swap_ab, PERSISTENT=persistent,
                    VARLEN=varlen, WITH_DQ=with_dq, PREFETCH=prefetch, EARLY_DV=early_dv and not swap_ab,
                    P_IN_DQ=p_in_dq, DIM_V=head_dim_v, DV_MAIN=dv_main, DV_REST=dv_rest,
                    CHUNK_TILES=chunk_tiles and d_rest > 0, CHUNK_TILES_V=chunk_tiles and dv_rest > 0,
                    GROUP_SPLIT=group_split, FP32_PARTIALS=fp32_partials,
                    NAMED_HANDOVER=named_handover and warp_specialize and with_dq,
                    LATE_STATS=late_stats and swap_ab and warp_specialize,
                    DQ_FIRST=dq_first and with_dq,
                    SPLIT_MASKED=split_masked and masked and window_left < 0 and not prefetch)


def named_handover_reason(num_warps: int, warp_specialize: bool, p_in_dq: bool,
                          deterministic: bool = False) -> str | None:
    """Why named_handover cannot run with these fields (None: it can): the named barrier counts two compute
    warpgroups and the dQ warp, and p_in_dq / deterministic mode have no dQ tile of their own to hand over."""
    if num_warps != 8 or not warp_specialize or p_in_dq or deterministic:
        return (f"named_handover=true: needs num_warps=8 (two warpgroups), warp_specialize=true, p_in_dq=false and "
                f"deterministic=false (got {num_warps}, {warp_specialize}, {p_in_dq}, {deterministic})")
    return None
