"""Compiled resources of every Gluon forward variant (kernels/gluon/forward_variants.py) for sm90, on any machine:

    python scripts/forward_variants_compile.py [--head-dims 64,128] [--variants pp2,pp3] [--dtype bf16]

One line per (variant, head dim, causal): the tile, registers (the kernel's .maxnreg; the partitions' setmaxnreg
shares are in the variant's docs), spills, shared memory and status (runners.compile.forward's rows). Run it with
each Triton (3.9: this python; 3.6: /work/venv36/bin/python).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", default="64,96,128,192,256")
    parser.add_argument("--variants", default="")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = parser.parse_args()
    import triton

    from runners.compile.forward import check_forward_kernel
    from kernels.gluon.forward_variants import FORWARD_VARIANTS, variant_blocks
    names = [n for n in args.variants.split(",") if n] or list(FORWARD_VARIANTS)
    bad = 0
    print(f"Triton {triton.__version__}  sm90  {args.dtype}")
    for name in names:
        for head_dim in map(int, args.head_dims.split(",")):
            for causal in (False, True):
                blocks = variant_blocks(name, head_dim, causal)
                if blocks is None:
                    continue
                row = check_forward_kernel(head_dim, causal, args.dtype, dict(blocks._asdict()))
                ok = row["status"] == "ok" and not row.get("spill_store_bytes") and not row.get("spill_load_bytes")
                bad += not ok
                print(f"{name:10s} D{head_dim:<3d} {'causal' if causal else 'full  '} "
                      f"{blocks.BLOCK_M}x{blocks.BLOCK_N} w{blocks.num_warps} s{blocks.num_stages}  "
                      f"regs {row.get('n_regs')}  "
                      f"spills {row.get('spill_store_bytes')}/{row.get('spill_load_bytes')} B  "
                      f"smem {row.get('smem_bytes', 0) / 1024:.1f} KB  {row['status']}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
