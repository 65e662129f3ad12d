"""A named hardware barrier for ws's dQ hand-over (issue 43, block field `named_handover`), FlashAttention-3's
mechanism: the compute warps `bar.arrive` once their parts of a step's dQ are in shared memory and go on; the dQ warp
`bar.sync`s on the same barrier, so it waits for all of them. An mbarrier arrive from the 8-warp compute partition is
lowered as a barrier of all 256 compute threads, then one thread's arrive: the warpgroups wait for each other there,
every step. (A barrier per warpgroup, as FA3 has, needs a barrier id that ptxas cannot see is warp-uniform: a
predicated or register id made it spill 280-330 B at D128, so both warpgroups share one.)

Gluon has no name for named barriers, so each is one inline PTX statement executed once per thread (a tensor with
one element per thread). Id 12 is outside the ones Triton's warp specialization takes (0 for the default
partition, 1 for the register hand-over; multi-warp workers would take the next ids, and ws's are one warp each):
`tests/test_ws.py` checks the compiled PTX's bar ids."""
from kernels.gluon.compat import gl, gluon

DQ_FULL_ID = 12  # the barrier's id: tests read it
COMPUTE_WARPS = 8  # the compute partition's warps (named_handover needs two warpgroups)
DQ_FULL_THREADS = 32 * COMPUTE_WARPS + 32  # the compute warps and the dQ warp
# the PTX statements (module constexprs: a jitted function reads them as it reads any global constexpr)
_ARRIVE = gl.constexpr(f"bar.arrive {DQ_FULL_ID}, {DQ_FULL_THREADS}; mov.u32 $0, $1;")
_SYNC = gl.constexpr(f"bar.sync {DQ_FULL_ID}, {DQ_FULL_THREADS}; mov.u32 $0, $1;")
_WARPS = gl.constexpr(COMPUTE_WARPS)


@gluon.jit
def _one_per_thread(WARPS: gl.constexpr):
    """A [32 x WARPS] int32 tensor, one element per thread of a WARPS-warp partition (the inline asm's operand)."""
    return gl.full([32 * WARPS], 0, gl.int32, gl.BlockedLayout([1], [32], [WARPS], [0]))


@gluon.jit
def compute_arrive_dq_full():
    """Compute warps: this thread's part of the step's dQ is in shared memory (fenced before): bar.arrive, no
    wait."""
    gl.inline_asm_elementwise(_ARRIVE, "=r,r", [_one_per_thread(_WARPS)],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def dq_warp_wait_full():
    """The dQ warp waits until every compute thread has arrived (bar.sync)."""
    gl.inline_asm_elementwise(_SYNC, "=r,r", [_one_per_thread(1)],
                              dtype=gl.int32, is_pure=False, pack=1)
