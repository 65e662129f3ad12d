"""The child that runners/point/ncu.py runs under Nsight Compute: one point's backward, warm-up calls first, then one
call inside the NVTX push/pop range `ncu.NVTX_RANGE` (the only one ncu profiles).

    python -m runners.point.ncu_child '<spec JSON from runners.point.ncu.child_spec>'

Checks nothing and times nothing (the sweep's row has the accuracy and the timings); prints nothing on stdout but
what ncu adds (its CSV is parsed from there). A failure is a traceback on stderr and a non-zero exit.
"""
import json
import sys

MODIFIER_FIELDS = ("window_left", "window_right", "softcap", "gate")  # the Point's score modifiers (issue 24)


def point_from_spec(spec: dict):
    """The runners.point.schema.Point that runners.point.ncu.child_spec describes (plugins imported first)."""
    from runners.point import measure  # noqa: F401 - sets the interpreter switch before `variants` is imported
    import variants
    from runners.point.schema import Point, import_plugins

    import_plugins(spec.get("plugins") or [])
    variant = variants.get(spec["variant"])
    return Point(variant=spec["variant"], batch=spec["batch"], seq=spec["seq"], seq_k=spec["seq_k"],
                 heads=spec["heads"], kv_heads=spec["kv_heads"], head_dim=spec["head_dim"], causal=spec["causal"],
                 dtype=spec["dtype"], layout=spec["layout"], blocks=variant.Blocks.from_dict(spec["blocks"]),
                 block_overrides={}, doc_lens=tuple(spec["doc_lens"]) if spec.get("doc_lens") else None,
                 **{name: spec[name] for name in MODIFIER_FIELDS if name in spec})


def run(spec: dict) -> None:
    from runners.point import measure, ncu  # measure first: it sets the interpreter switch

    import torch
    import variants

    point = point_from_spec(spec)
    variant = variants.get(point.variant)
    device = f"cuda:{int(spec['gpu_index'])}"
    torch.cuda.set_device(device)
    inputs = measure.point_inputs(point, device, int(spec["seed"]))
    fn = measure.prepare_backward(variant, point, point.problem("cuda"), inputs)
    for _ in range(int(spec.get("warmup_calls", ncu.WARMUP_CALLS))):
        fn()
    torch.cuda.synchronize(device)
    torch.cuda.nvtx.range_push(ncu.NVTX_RANGE)
    fn()
    torch.cuda.synchronize(device)
    torch.cuda.nvtx.range_pop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    run(json.loads(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
