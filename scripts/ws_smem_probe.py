"""frontier_probe.md proposals 2 and 3 on the CPU: ws's main kernel compiled for sm90 (never launched) with each
value of the block fields `ds_layout` (P's and dS's shared layout) and `stats_pairs` (LSE and delta as one tile of
pairs), at D64's and D128's default tiles: registers, spills, shared memory, and the shared-memory instructions of
the compute warps' step and of the load warp, counted in the PTX and in the SASS (nvdisasm of the cubin) by the
source function their line info names.

    python scripts/ws_smem_probe.py            # the installed Triton
    python scripts/ws_smem_probe.py --both     # and /work/venv36/bin/python (Triton 3.6, the GPU machines')

"step" counts the instructions of the compute warps' per-step code (kernels/gluon/mma.py's step and gradient
functions, the dQ staging, the stats unpacking); "load" the load warp's per-step code (loads.py's `_load_tile`,
`stats_pair`). The loop body is issued once per step (no unrolling at these defaults), so these are per step and
thread (PTX) or warp (SASS).
"""
import ast
import collections
import os
import re
import subprocess
import sys

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

CASES = [("D64", 64, False), ("D64-causal", 64, True), ("D128", 128, False), ("D128-causal", 128, True)]
VALUES = [("default", {}), ("swz64", {"ds_layout": "swz64"}), ("transposed", {"ds_layout": "transposed"}),
          ("stats_pairs", {"stats_pairs": True})]
STEP = {("mma.py", f) for f in ("_mma_step", "gradients", "gradients_mn", "_issue_s", "_issue_dp", "_probabilities")}
STEP |= {("loads.py", "stats_unpair"), ("epilogue.py", "stage_dq"), ("epilogue.py", "_bank_spread_rows")}
LOAD = {("loads.py", "_load_tile"), ("loads.py", "stats_pair"), ("loads.py", "issue_qdo")}
PTX_OPS = re.compile(r"^\s*(?:@%p\d+\s+)?((?:ld|st)\.shared\S*|stmatrix\S*|ldmatrix\S*)")
SASS_OPS = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?((?:LDS|STS|STSM|LDSM)(?:\.\S+)?)\s")


@__import__("functools").cache
def functions_of(path: str) -> list[tuple[int, int, str]]:
    """[(first line, last line, name)] of the functions defined in a source file (innermost last)."""
    tree = ast.parse(open(path).read())
    return sorted((node.lineno, node.end_lineno, node.name) for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef))


def function_at(path: str, line: int) -> tuple[str, str]:
    """(file name, the innermost function holding the line) of a line-info location."""
    name = "?"
    if os.path.exists(path):
        for first, last, fn in functions_of(path):
            if first <= line <= last:
                name = fn
    return os.path.basename(path), name


def count(text: str, ops: re.Pattern, loc: re.Pattern, files: dict | None) -> dict:
    """{(role, opcode): count}: role 'step' / 'load' / 'other' by the instruction's last line-info location."""
    where, out = ("", ""), collections.Counter()
    for line in text.splitlines():
        m = loc.match(line)
        if m:
            path = files[m.group(1)] if files is not None else m.group(1)
            where = function_at(path, int(m.group(2)))
            continue
        m = ops.match(line)
        if m:
            role = "step" if where in STEP else "load" if where in LOAD else "other"
            out[role, m.group(1)] += 1
    return out


def ptx_counts(ptx: str) -> dict:
    files = dict(re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.M))
    return count(ptx, PTX_OPS, re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s"), files)


def sass_counts(cubin: bytes) -> dict:
    import tempfile

    import triton
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([nvdisasm, "-g", "-c", f.name], capture_output=True, text=True, check=True).stdout
    return count(sass, SASS_OPS, re.compile(r'^\s*//## File "([^"]+)", line (\d+)'), None)


def short(counts: dict, role: str) -> str:
    """'op xN, ...' of one role, opcodes shortened."""
    items = sorted((op, n) for (r, op), n in counts.items() if r == role)
    names = {"stmatrix.sync.aligned.m8n8.x4.shared.b16": "stmatrix.x4",
             "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16": "stmatrix.x4.trans"}
    return ", ".join(f"{names.get(op, op)} x{n}" for op, n in items) or "-"


def probe(case, value) -> str:
    from runners.compile.resources import capture_launches, compile_kernel, ptxas_usage
    name, head_dim, causal = case
    label, overrides = value
    try:
        blocks, _, launches = capture_launches("ws", head_dim, "bf16", causal, 16, 16, overrides)
        fn, args, kwargs = next(launch for launch in launches if launch[0].__name__ == "_ws_backward_kernel")
        compiled = compile_kernel(fn, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - a value that does not compile is an answer
        return f"| {name} | {label} | {type(exc).__name__}: {' '.join(str(exc).split())[:200]} |"
    usage = ptxas_usage(compiled.asm["ptx"])
    ptx, sass = ptx_counts(compiled.asm["ptx"]), sass_counts(compiled.asm["cubin"])
    tile = f"M{blocks.BLOCK_M} N{blocks.BLOCK_N} {'swap' if blocks.swap_ab else 'mn'} s{blocks.num_stages}"
    return (f"| {name} ({tile}) | {label} | {usage['n_regs']} | {usage['spill_store_bytes']} | "
            f"{int(compiled.metadata.shared)} | {short(ptx, 'step')} | {short(sass, 'step')} | {short(ptx, 'load')} | "
            f"{short(sass, 'load')} |")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from runners.compile.resources import use_compiler_not_interpreter
    use_compiler_not_interpreter()
    import triton
    print(f"triton {triton.__version__}: ws `_ws_backward_kernel`, bf16, H16, sm90 (compiled, not launched)")
    print("| case | value | regs | spill B | smem B | step PTX | step SASS | load PTX | load SASS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        for value in VALUES:
            print(probe(case, value), flush=True)
    venv36 = "/work/venv36/bin/python"
    if "--both" in argv and os.path.exists(venv36) and triton.__version__ != "3.6.0":
        subprocess.run([venv36, os.path.abspath(__file__)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
