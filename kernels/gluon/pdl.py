"""Programmatic dependent launch (PDL) for ws (issue 43, block field `pdl`): a kernel launched with `launch_pdl=True`
may be placed on the SMs while the launch before it in the stream is still running, once every program of that one
has signalled (`griddepcontrol.launch_dependents`) or ended. It must then wait (`griddepcontrol.wait`) before it reads
anything that launch writes: the wait returns when the earlier launch has ended and its writes are visible. What
overlaps is the later kernel's launch and set-up (shared memory, barriers) with the earlier one's last programs.

Gluon has no name for the two PTX statements, so each is one inline statement without operands; both are no-ops in a
kernel launched without PDL. The stock Triton kernels use `triton.language.extra.cuda`'s `gdc_wait` /
`gdc_launch_dependents`, the same statements (dQ's conversion waits; the delta launch signals nothing, so ws's main
kernel may start as its last programs end: one more parameter would break kernels/preprocess.py's 20-parameter
limit, tests/test_kernel_shape.py)."""
from kernels.gluon.compat import gl, gluon


@gluon.jit
def wait_for_prior_launch():
    """griddepcontrol.wait: the launch before this one has ended and its memory writes are visible."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def let_next_launch_start():
    """griddepcontrol.launch_dependents: this program no longer holds back a PDL launch after this one."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)
