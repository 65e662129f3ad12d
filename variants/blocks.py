"""Block configs: one dataclass per design, with per-field validation that names the field and the rule."""
from dataclasses import asdict, dataclass, fields

NUM_WARPS = (1, 2, 4, 8, 16)


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
        return asdict(self)

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
    BLOCK_M1: int = 64  # dK/dV kernel: query block walked
    BLOCK_N1: int = 64  # dK/dV kernel: resident key block
    num_warps1: int = 4
    num_stages1: int = 2
    BLOCK_M2: int = 64  # dQ kernel: resident query block
    BLOCK_N2: int = 64  # dQ kernel: key block walked
    num_warps2: int = 4
    num_stages2: int = 2
    longest_first: bool = False  # causal: grid (heads, blocks) so every head's longest blocks start first
    prescale: bool = False  # resident K (dK/dV kernel) and Q (dQ kernel) pre-multiplied by scale * log2(e)


@dataclass(frozen=True)
class AtomicBlocks(Blocks):
    BLOCK_M: int = 64  # query block walked
    BLOCK_N: int = 64  # resident key block
    num_warps: int = 4
    num_stages: int = 2
    deterministic: bool = False  # True: dQ by a second, atomic-free pass (bitwise reproducible, 10 -> 14 N^2 d)
    longest_first: bool = False  # causal: grid (heads, blocks) so every head's longest blocks start first


@dataclass(frozen=True)
class FusedBlocks(Blocks):
    BLOCK_M1: int = 32  # dK/dV part: query block walked
    BLOCK_N1: int = 64  # dK/dV part: resident key block
    BLOCK_M2: int = 64  # dQ part: resident query block
    BLOCK_N2: int = 32  # dQ part: key block walked
    BLK_SLICE_FACTOR: int = 2  # the causal diagonal is walked in blocks of BLOCK_M1 (BLOCK_N2) / this
    prescale: bool = True  # resident K (and Q) pre-multiplied by scale * log2(e)
    num_warps: int = 4
    num_stages: int = 2

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
    longest_first: bool = False  # causal: grid (heads, blocks) so every head's longest blocks start first
    warp_specialize: bool = False  # tl.range(warp_specialize=True) on the unmasked inner loop
