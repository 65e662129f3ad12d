"""The Gluon names that differ between Triton releases, in one place (3.6 on the GPU machines, 3.9+ in CI).

    from kernels.gluon.compat import gl, gluon, tma_load, tma_store, tma_reduce_add, cta_barrier, aggregate, ...

`GLUON_MISSING` is None when this Triton has everything the Gluon designs use, else the reason it does not
(an old Triton, no Gluon): the variants turn it into an `unsupported` row.
"""
import triton

GLUON_MISSING: str | None = None
try:
    from triton._C.libtriton import ir
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language._core import builtin
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                                  warpgroup_mma_init, warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError as exc:  # no Gluon in this Triton
    GLUON_MISSING = f"Triton {triton.__version__} has no Gluon Hopper API ({exc})"

if GLUON_MISSING is None:
    # Records of kernel values (`@aggregate` classes, as Triton's Gluon tutorials write them): 3.9 has
    # gluon.aggregate, 3.6 only the language's `_aggregate`, which 3.9 keeps too; one name for both. A field
    # annotated `Value` holds a tensor, a shared-memory tile or a constexpr (an int the launch specialized to 1,
    # a 0 literal): every Triton value derives from base_value.
    from triton.language.core import _aggregate
    from triton.language.core import base_value as Value

    def aggregate(cls):
        """`_aggregate` with the class's own __init__ (3.6 needs one) marked as a builtin: 3.9's JIT rejects a plain
        function it meets while hashing a kernel's dependencies (3.6 lets it pass). The fields' annotations and the
        @gluon.jit methods stay in the kernel's cache key."""
        init = cls.__dict__.get("__init__")
        if init is not None:
            init.__triton_builtin__ = True
        return _aggregate(cls)

    # TMA global -> shared: 3.9 calls it async_load; 3.6 has only async_copy_global_to_shared (same arguments).
    tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

    # TMA shared -> global: 3.9 calls it async_store; 3.6 has only async_copy_shared_to_global (same arguments).
    tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

    # CTA-wide barrier (all warps): gl.barrier in 3.9, gl.thread_barrier in 3.6.
    cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier

    if hasattr(tma, "async_atomic_add"):  # 3.9+: the public TMA reduce-add (cp.reduce.async.bulk.tensor .add)
        tma_reduce_add = tma.async_atomic_add
    else:  # 3.6: no public name; the compiled library's builder has the op
        @builtin
        def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
            """Adds the shared-memory tile `src` into the global tile of `tensor_desc` at `coord` (TMA reduce)."""
            coord = _semantic._convert_to_ir_values(coord, require_i64=False)
            _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                      src.handle)

    # A shared tile viewed with another dtype / shape / layout (the same bytes): 3.9's method is `reinterpret`,
    # 3.6's `_reinterpret` (same arguments).
    from triton.experimental.gluon.language._core import shared_memory_descriptor as _smem_desc
    _REINTERPRET = getattr(_smem_desc, "reinterpret", None) or _smem_desc._reinterpret

    @builtin
    def smem_reinterpret(tile, dtype, shape, layout, _semantic=None):
        """tile (a shared_memory_descriptor) as [shape] of dtype in layout, over the same bytes."""
        return _REINTERPRET(tile, dtype, shape, layout, _semantic=_semantic)
