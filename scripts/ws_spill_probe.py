"""Where ws's main kernel spills: per case (variant, D, causal) at the sm90 default blocks, the compiled registers,
spills and shared memory, the setmaxnreg values of the partitions (PTX), and every STL / LDL of the SASS with the
source line it came from (nvdisasm -gi on the cubin ptxas makes from Triton's PTX). CPU only.

    python scripts/ws_spill_probe.py [--cases ws:128:1,ws:64:0] [--blocks '{"num_warps": 8}'] [--sass-dir DIR]
    /work/venv36/bin/python scripts/ws_spill_probe.py   # the same under Triton 3.6
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT_CASES = [(v, d, c) for v in ("ws", "ws_two_pass") for d in (64, 128) for c in (False, True)]


def sass_of(ptx: str, capability: int = 90) -> tuple[str, str]:
    """(ptxas -v log, nvdisasm -gi SASS) of the PTX, ptxas flags as runners.compile.resources.ptxas_usage."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability
    ptxas = get_ptxas(capability).path
    nvdisasm = os.path.join(os.path.dirname(ptxas), "nvdisasm")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        log = subprocess.run([ptxas, "-lineinfo", "-v", "--regAllocOptLevel=2",
                              f"--gpu-name={sm_arch_from_capability(capability)}", src, "-o", src + ".o"],
                             capture_output=True, text=True)
        sass = subprocess.run([nvdisasm, "-gi", "-c", src + ".o"], capture_output=True, text=True)
    return log.stdout + log.stderr, sass.stdout + sass.stderr


def attribute(sass: str) -> list[tuple[str, str, str]]:
    """[(op, partition, source chain)] of every STL / LDL: the partition by the last USETMAXREG before it (the
    compute warps' region comes first, then the workers', laid out in turn; 'entry' before any), the source chain
    innermost first by the line-info comments before it."""
    out, chain, part, fresh = [], [], "entry", True
    for line in sass.splitlines():
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:  # consecutive comments: one frame each, innermost first
            chain = ([] if fresh else chain) + [f"{os.path.basename(m.group(1))}:{m.group(2)}"]
            fresh = False
            continue
        fresh = True
        reg = re.search(r"USETMAXREG\.\S+\s+(?:UP\d+,\s*)?(0x[0-9a-f]+)", line)
        if reg:
            part = f"maxnreg {int(reg.group(1), 16)}"
        op = re.search(r"\b(STL|LDL)(\.\w+)*\b", line)
        if op and not line.lstrip().startswith("//"):
            out.append((op.group(1), part, " <- ".join(chain[:3])))
    return out


def run_case(variant, head_dim, causal, blocks, sass_dir):
    from runners.compile.resources import capture_launches, compile_kernel
    _, _, launches = capture_launches(variant, head_dim, "bf16", causal, 4, 2, blocks)
    for fn, args, kwargs in launches:
        if fn.__name__ != "_ws_backward_kernel":
            continue
        compiled = compile_kernel(fn, args, kwargs)
        ptx = compiled.asm["ptx"]
        log, sass = sass_of(ptx)
        regs = re.search(r"Used (\d+) registers", log)
        st = re.search(r"(\d+) bytes spill stores", log)
        ld = re.search(r"(\d+) bytes spill loads", log)
        maxnreg = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)
        name = f"{variant} D{head_dim} {'causal' if causal else 'full'}"
        print(f"== {name}: regs {regs and regs.group(1)} spills {st and st.group(1)} B stored / "
              f"{ld and ld.group(1)} B loaded, smem {compiled.metadata.shared} B, warps {compiled.metadata.num_warps}, "
              f"setmaxnreg {sorted(set(maxnreg))}")
        counts = collections.Counter(attribute(sass))
        for (op, part, where), n in sorted(counts.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
            print(f"   {part:<12} {op} x{n:<3} {where}")
        if sass_dir:
            os.makedirs(sass_dir, exist_ok=True)
            stem = os.path.join(sass_dir, f"{variant}_d{head_dim}_{'causal' if causal else 'full'}")
            open(stem + ".sass", "w").write(sass)
            open(stem + ".ptx", "w").write(ptx)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", help="variant:D:causal(0/1),... (default: ws, ws_two_pass x D64, D128 x causal)")
    parser.add_argument("--blocks", default="{}")
    parser.add_argument("--sass-dir")
    args = parser.parse_args(argv)
    from runners.compile.resources import use_compiler_not_interpreter
    use_compiler_not_interpreter()
    import triton
    print(f"Triton {triton.__version__}")
    cases = DEFAULT_CASES if not args.cases else [
        (v, int(d), c == "1") for v, d, c in (item.split(":") for item in args.cases.split(","))]
    for variant, head_dim, causal in cases:
        run_case(variant, head_dim, causal, json.loads(args.blocks), args.sass_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
