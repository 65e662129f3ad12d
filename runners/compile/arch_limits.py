"""Per-architecture hardware limits: the one table runners.compile_check (and runners.point.profile's Hopper numbers)
read. Keys are the `--arch` names (sm80 ... sm120); `capability` is Triton's target arch (GPUTarget("cuda", 90, 32))
and `table_key` the conf/block_defaults.yaml key of that compute capability ("9.0").

Numbers: the CUDA C++ Programming Guide's "Technical Specifications per Compute Capability" (registers per SM and
per thread, resident warps and blocks per SM, shared memory per SM and the opt-in maximum per block).
`example` names a GPU of that capability, for the reader only.
"""
from dataclasses import dataclass

KB = 1024


class ArchError(ValueError):
    """A bad --arch: one line, never a traceback."""


@dataclass(frozen=True)
class ArchLimits:
    name: str  # "sm90"
    capability: int  # 90: Triton's target arch
    example: str
    regs_per_sm: int
    max_regs_per_thread: int
    smem_per_sm: int  # bytes
    smem_per_block: int  # bytes: the opt-in maximum of dynamic shared memory per block
    max_warps_per_sm: int
    max_programs_per_sm: int  # resident thread blocks per SM
    max_threads_per_block: int = 1024

    @property
    def table_key(self) -> str:
        """The compute capability as conf/block_defaults.yaml names it: 90 -> "9.0", 120 -> "12.0"."""
        return f"{self.capability // 10}.{self.capability % 10}"

    def occupancy_limits(self) -> dict:
        """The dict runners.point.profile.programs_per_sm reads."""
        return {"regs_per_sm": self.regs_per_sm, "smem_per_sm": self.smem_per_sm,
                "max_warps_per_sm": self.max_warps_per_sm, "max_programs_per_sm": self.max_programs_per_sm}


# Checked against NVIDIA's own per-capability table in CCCL, cuda::arch::traits<id::sm_XX>() (max_shared_memory_per_
# multiprocessor, max_shared_memory_per_block_optin = that - 1 KB reserved per block, max_blocks_per_multiprocessor,
# max_threads_per_multiprocessor / 32; 64 K registers per SM, 255 per thread for all), every value below agrees:
# https://github.com/NVIDIA/cccl/blob/efee2cf61c8e5d30b47ef60a100be4f9582e4f4b/libcudacxx/include/cuda/__device/arch_traits.h
# sm120: 100 KB per SM, 99 KB per block, 1536 threads (48 warps), 32 blocks (sm86: 16 blocks, sm89: 24).
# The Programming Guide's table the docstring names (its page could not be read back where this was checked):
# https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#features-and-technical-specifications
ARCHS = {a.name: a for a in (
    ArchLimits("sm80", 80, "A100", 65536, 255, 164 * KB, 163 * KB, 64, 32),
    ArchLimits("sm86", 86, "A10, A40, RTX 30xx", 65536, 255, 100 * KB, 99 * KB, 48, 16),
    ArchLimits("sm89", 89, "L4, L40S, RTX 40xx", 65536, 255, 100 * KB, 99 * KB, 48, 24),
    ArchLimits("sm90", 90, "H100, H200", 65536, 255, 228 * KB, 227 * KB, 64, 32),
    ArchLimits("sm100", 100, "B200", 65536, 255, 228 * KB, 227 * KB, 64, 32),
    ArchLimits("sm120", 120, "RTX 50xx, RTX PRO 6000 Blackwell", 65536, 255, 100 * KB, 99 * KB, 48, 32),
)}
DEFAULT_ARCH = "sm90"


def parse_archs(text: str) -> list[ArchLimits]:
    """'sm80,sm90' (or '80', '9.0') -> [ArchLimits, ...] in the order given; ArchError names the known ones."""
    out = []
    for item in filter(None, (part.strip().lower() for part in str(text).split(","))):
        name = item if item.startswith("sm") else "sm" + item.replace(".", "")
        if name not in ARCHS:
            raise ArchError(f"--arch: unknown architecture {item!r}; known: {', '.join(ARCHS)}")
        if ARCHS[name] not in out:
            out.append(ARCHS[name])
    if not out:
        raise ArchError(f"--arch: empty; known: {', '.join(ARCHS)}")
    return out
