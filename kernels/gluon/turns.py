"""The forward's ping-pong turns by named hardware barriers (issue 42, FwdBlocks.named_turns), FA3's scheduler
barriers: consumer c waits for its turn with `bar.sync 12 + c, 256` (its own 128 threads and the 128 of the consumer
before it, which `bar.arrive`d there after issuing its wgmmas) and passes the turn with `bar.arrive` on the next
consumer's barrier. The mbarrier turns (the default) cost a 128-thread `bar.sync` inside each arrive (Gluon lowers
an mbarrier arrive from a 4-warp partition as a barrier of the warpgroup, then one thread's arrive) and a polled
wait; these cost one barrier instruction each.

A turn's arrive can run at most one lap ahead of its wait (the next arrive needs the turns of every other consumer
in between), so a barrier never sees two laps' arrivals at once. The last consumer arrives once on consumer 0's
barrier before its first turn (consumer 0 goes first), and consumer 0 takes one more turn after its last, which
leaves no arrival pending when the program ends. Ids 12-14: outside those Triton's warp specialization takes (0 for
the default partition, 1 for the register hand-over, then one per multi-warp worker); tests/test_gluon_forward.py
checks the compiled PTX's ids. Each PTX statement runs once per thread (a tensor with one element per thread)."""
from kernels.gluon.compat import gl, gluon

TURN_ID0 = 12  # consumer c's barrier: TURN_ID0 + c (tests read it)
TURN_THREADS = 2 * 128  # a consumer warpgroup and the one that passes it the turn
_SYNC = tuple(gl.constexpr(f"bar.sync {TURN_ID0 + c}, {TURN_THREADS}; mov.u32 $0, $1;") for c in range(3))
_ARRIVE = tuple(gl.constexpr(f"bar.arrive {TURN_ID0 + c}, {TURN_THREADS}; mov.u32 $0, $1;") for c in range(3))
_SYNC0, _SYNC1, _SYNC2 = _SYNC
_ARRIVE0, _ARRIVE1, _ARRIVE2 = _ARRIVE


@gluon.jit
def _run(ASM: gl.constexpr):
    """One inline PTX statement per thread of the 4-warp consumer partition."""
    gl.inline_asm_elementwise(ASM, "=r,r", [gl.full([128], 0, gl.int32, gl.BlockedLayout([1], [32], [4], [0]))],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _run_for(CONSUMER: gl.constexpr, ASM0: gl.constexpr, ASM1: gl.constexpr, ASM2: gl.constexpr):
    """The statement of that consumer's barrier, its id a literal (a register id spilled: kernels/gluon/named.py)."""
    if CONSUMER == 0:
        _run(ASM0)
    elif CONSUMER == 1:
        _run(ASM1)
    else:
        _run(ASM2)


@gluon.jit
def wait_turn(ME: gl.constexpr):
    """Consumer ME waits until the consumer before it has passed the turn."""
    _run_for(ME, _SYNC0, _SYNC1, _SYNC2)


@gluon.jit
def pass_turn(NEXT: gl.constexpr):
    """The turn goes to consumer NEXT (no wait)."""
    _run_for(NEXT, _ARRIVE0, _ARRIVE1, _ARRIVE2)
