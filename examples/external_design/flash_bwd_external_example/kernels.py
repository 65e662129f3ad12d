"""external_example's kernel: Triton code and its launcher only (no variants, no runners)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _cast_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    """y = x in y's dtype: BLOCK_SIZE elements per program."""
    i_n = tl.program_id(0)
    o_n = i_n * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # [BLOCK_SIZE] element offsets
    m_n = o_n < n
    b_x = tl.load(x_ptr + o_n, mask=m_n)  # [BLOCK_SIZE]
    tl.store(y_ptr + o_n, b_x.to(y_ptr.dtype.element_ty), mask=m_n)


def cast(x: torch.Tensor, dtype: torch.dtype, *, BLOCK_SIZE: int, num_warps: int) -> torch.Tensor:
    """x (any shape) -> a contiguous copy in dtype, by _cast_kernel."""
    x = x.contiguous()
    y = torch.empty_like(x, dtype=dtype)
    _cast_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, x.numel(), BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return y
