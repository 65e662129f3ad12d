"""exp2 shared between the two pipes that can compute it (issue 43): the SFU's MUFU.EX2 runs 16 results a clock on
an SM, an FMA-pipe polynomial 128 operations a clock. The backward's P = exp2(S - LSE) is a burst of MUFU.EX2 in
every step (Nsight Compute on an H100: back-to-back EX2 stalls 3x FA4's), so `exp2_split(x, ONE_IN)` computes one
element in every ONE_IN on the FMA pipe:

    2^x = 2^j * 2^f,   j = floor(x),  f = x - j in [0, 1),  2^f ~ 1 + f (c1 + f (c2 + f c3))

with j from the rounding of x + 1.5 * 2^23 toward -inf (its low mantissa bits) and 2^j added into the exponent
bits. The cubic's relative error is below 8.6e-5 on [0, 1) (a weighted least-squares fit), under half an ulp of
fp16 (4.9e-4) and bf16 (3.9e-3), which P is rounded to. x is clamped at -127, so x <= -127 (a masked -inf among
them) gives exactly 0.
"""
from kernels.gluon.compat import gl, gluon

_C1, _C2, _C3 = "0f3F31F329", "0f3E691C03", "0f3D9DD4E0"  # 0.69511658, 0.22764593, 0.07706619
_ROUND = "0f4B400000"  # 1.5 * 2^23: x + it, rounded toward -inf, holds floor(x) in its low mantissa bits
_FLOOR = "0fC2FE0000"  # -127: the smallest exponent the sum's bits can carry


def _polynomial(out: str, x: str) -> str:
    """PTX: out = 2^x on the FMA pipe (registers of the enclosing block: xc t j f p pb e)."""
    return (f"max.ftz.f32 xc, {x}, {_FLOOR}; add.rm.ftz.f32 t, xc, {_ROUND}; sub.ftz.f32 j, t, {_ROUND}; "
            f"sub.ftz.f32 f, xc, j; fma.rn.ftz.f32 p, f, {_C3}, {_C2}; fma.rn.ftz.f32 p, p, f, {_C1}; "
            f"fma.rn.ftz.f32 p, p, f, 0f3F800000; mov.b32 pb, p; mov.b32 e, t; shl.b32 e, e, 23; "
            f"add.s32 pb, pb, e; mov.b32 {out}, pb;")


def _split_asm(one_in: int) -> str:
    """PTX for a pack of one_in elements ($0.. out, $one_in.. in): MUFU.EX2 on all but the last."""
    sfu = " ".join(f"ex2.approx.ftz.f32 ${i}, ${one_in + i};" for i in range(one_in - 1))
    return ("{ .reg .f32 xc, t, j, f, p; .reg .b32 pb, e; " + sfu + " "
            + _polynomial(f"${one_in - 1}", f"${2 * one_in - 1}") + " }")


SPLIT_ASM_2 = gl.constexpr(_split_asm(2))
SPLIT_ASM_4 = gl.constexpr(_split_asm(4))
CONSTRAINTS_2 = gl.constexpr(",".join(["=f"] * 2 + ["f"] * 2))
CONSTRAINTS_4 = gl.constexpr(",".join(["=f"] * 4 + ["f"] * 4))


@gluon.jit
def exp2_split(x, ONE_IN: gl.constexpr):
    """2^x of an fp32 tensor, one element in ONE_IN (2 or 4; 0: none) by the FMA-pipe polynomial, the rest on
    MUFU.EX2 (the pack: a thread's consecutive registers)."""
    if ONE_IN == 2:
        y = gl.inline_asm_elementwise(SPLIT_ASM_2, CONSTRAINTS_2, [x], dtype=gl.float32, is_pure=True, pack=2)
    elif ONE_IN == 4:
        y = gl.inline_asm_elementwise(SPLIT_ASM_4, CONSTRAINTS_4, [x], dtype=gl.float32, is_pure=True, pack=4)
    else:
        y = gl.exp2(x)
    return y
