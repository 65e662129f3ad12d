"""Exploration on one sm90 GPU (issue 42): the Gluon forward checked against the fp32 reference, then timed against
the stock Triton forward, SDPA's cuDNN / flash forwards and FA4's forward (when installed) on the FlashAttention
grid (tokens 16384, hidden 2048).
Not a result table (rows come from runners.sweep once forward-only rows exist); a guide for the default tiles and
for when `forward=auto` may become the default.

    python scripts/forward_bench.py [--dtype bf16] [--seqs 1024,4096,16384] [--head-dims 64,128] \\
        [--tiles 128x128x8x2,128x64x8x2] [--variants ws2,pp2,pp2_serial,pp3] [--no-fa2]

Prints per cell: the Gluon forward's relative error against the reference (a wrong cell is never timed) and the
forward TFLOPS (FlashAttention convention 4 * B * H * N^2 * d, halved when causal; triton.testing.do_bench median)
of the stock forward, the Gluon forward at its default tile, at each --tiles tile and each --variants variant
(kernels/gluon/forward_variants.py: consumer partitions, ping-pong, overlap off, 192 rows; each checked against the
reference like the default), and SDPA's backends.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402

from kernels.forward import attention_forward  # noqa: E402
from kernels.gluon.forward import FwdBlocks, default_forward_blocks, gluon_attention_forward  # noqa: E402
from kernels.gluon.forward_variants import variant_blocks  # noqa: E402
from variants.accuracy import REL_TOL, error  # noqa: E402
from variants.reference import reference_forward  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def sdpa(backend):
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    def run(q, k, v, causal, scale):
        with sdpa_kernel(backend):  # [B, H, N, D] views of the [B, N, H, D] tensors
            return scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                is_causal=causal, scale=scale)
    return run


def fa4_forward():
    """FlashAttention-4's forward (flash_attn.cute, carried as in docs/fa4.md), or None when it is not installed."""
    try:
        from flash_attn.cute import flash_attn_func
    except ImportError:
        return None

    def run(q, k, v, causal, scale):  # [B, N, H, D]; returns (out, lse) or out depending on the version
        return flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    parser.add_argument("--seqs", default="1024,4096,16384")
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--tiles", default="", help="extra Gluon tiles BLOCK_MxBLOCK_Nxnum_warpsxnum_stages, comma list")
    parser.add_argument("--variants", default="", help="Gluon forward variants (forward_variants.py), comma list")
    parser.add_argument("--no-fa2", action="store_true", help="leave SDPA's flash backend out (time)")
    args = parser.parse_args()
    from torch.nn.attention import SDPBackend
    dtype = DTYPES[args.dtype]
    tiles = [FwdBlocks(*map(int, t.split("x"))) for t in args.tiles.split(",") if t]
    fa4 = fa4_forward()
    print(f"{torch.cuda.get_device_name()}  {args.dtype}  forward TFLOPS (FA convention), do_bench median"
          + ("" if fa4 else "  (flash_attn.cute not installed: no fa4 column)"))
    for head_dim in map(int, args.head_dims.split(",")):
        for seq in map(int, args.seqs.split(",")):
            for causal in (False, True):
                batch, heads = 16384 // seq, 2048 // head_dim
                q, k, v = (torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=dtype) for _ in range(3))
                scale = head_dim ** -0.5
                flops = 4 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
                cell = f"B{batch} H{heads} N{seq} D{head_dim}{' causal' if causal else ''}"
                gluons = {f"gluon {tuple(default_forward_blocks(head_dim, causal))[:4]}": None}
                gluons.update({f"gluon {tuple(tile)}": tile for tile in tiles})
                for name in filter(None, args.variants.split(",")):
                    blocks = variant_blocks(name, head_dim, causal)
                    if blocks is not None:
                        gluons[name] = blocks
                runs = {"stock": lambda: attention_forward(q, k, v, causal, scale)}
                notes = []
                ref = reference_forward(q, k, v, causal, scale) if batch * heads * seq * seq <= 2 ** 31 else None
                for name, blocks in gluons.items():
                    if ref is not None:  # the fp32 reference fits in memory: a wrong variant is never timed
                        err = error(gluon_attention_forward(q, k, v, causal, scale, blocks)[0], ref)
                        if not err.ok(dtype):
                            notes.append(f"{name} WRONG {err.rel:.1e} > {REL_TOL[dtype]:.0e}")
                            continue
                        notes.append(f"{err.rel:.1e}")
                    runs[name] = lambda blocks=blocks: gluon_attention_forward(q, k, v, causal, scale, blocks)
                del ref
                note = "rel err " + " ".join(notes) if notes else "not checked (reference too large)"
                backends = [("cudnn", SDPBackend.CUDNN_ATTENTION)]
                if not args.no_fa2:
                    backends.append(("fa2", SDPBackend.FLASH_ATTENTION))
                for name, backend in backends:
                    runs[name] = lambda backend=backend: sdpa(backend)(q, k, v, causal, scale)
                if fa4 is not None:
                    runs["fa4"] = lambda: fa4(q, k, v, causal, scale)
                parts = []
                for name, fn in runs.items():
                    try:
                        ms = triton.testing.do_bench(fn, warmup=25, rep=100)
                        parts.append(f"{name} {flops / ms / 1e9:.1f}")
                    except Exception as exc:  # noqa: BLE001 - a backend that cannot run this cell
                        parts.append(f"{name} -- ({type(exc).__name__})")
                print(f"{cell} ({note}): " + " | ".join(parts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
