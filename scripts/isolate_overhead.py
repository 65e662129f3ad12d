"""What fault isolation costs (docs/fault_isolation.md): worker start, CUDA init in the worker, the round trip
of one call, and a small point measured in-process vs isolated.

    python scripts/isolate_overhead.py [results_dir]      # prints one line per number
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from omegaconf import OmegaConf  # noqa: E402

from runners.point import env  # noqa: E402
from runners.isolation import isolate  # noqa: E402

env.use_interpreter_without_gpu()


def ping(cuda: bool = False) -> dict:
    """A trivial 'point' for the worker: its pid; with cuda, after initialising CUDA on device 0."""
    if cuda and not env.interpreting():
        import torch
        torch.zeros(1, device="cuda:0")
        torch.cuda.synchronize()
    return {"status": "ok", "pid": os.getpid()}


def main() -> None:
    cfg = OmegaConf.create({"isolate": True, "point_timeout_s": 300, "plugins": []})
    tic = time.perf_counter()
    isolate.call(cfg, ping)
    print(f"worker start (spawn + imports): {time.perf_counter() - tic:.2f} s")
    tic = time.perf_counter()
    isolate.call(cfg, ping, cuda=True)
    print(f"first CUDA use in the worker: {time.perf_counter() - tic:.2f} s")
    n = 200
    tic = time.perf_counter()
    for _ in range(n):
        isolate.call(cfg, ping)
    print(f"round trip of one call (pickle, pipe, unpickle): {(time.perf_counter() - tic) / n * 1e3:.3f} ms")
    isolate.shutdown()

    from hydra import compose, initialize_config_dir
    from runners import sweep

    results_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="isolate-overhead-")
    small = ["variant=two_pass", "seq=1024", "batch=2", "heads=8", "head_dim=64", "bench.warmup=25", "bench.rep=100",
             "bench.cpu_warmup=0", "bench.cpu_rep=1", "resume=false", f"results_dir={results_dir}",
             "sweep_id=overhead"]
    if env.interpreting():
        small += ["seq=33", "batch=1", "heads=2", "head_dim=16", "dtype=fp32"]
    with initialize_config_dir(config_dir=str(env.CONF_DIR), version_base="1.3", job_name="overhead"):
        for mode in ("false", "true"):
            times = []
            for _ in range(3):
                tic = time.perf_counter()
                sweep.run_point(compose("config", [*small, f"isolate={mode}"]), out=lambda _: None)
                times.append(time.perf_counter() - tic)
            print(f"run_point isolate={mode}: " + " ".join(f"{t:.2f}" for t in times) + " s (first includes warm-up)")
    isolate.shutdown()


if __name__ == "__main__":
    main()
