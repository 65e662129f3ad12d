"""What `runners.sweep` tells a user to do: the usage page `--help` prints ahead of Hydra's own help, and the
one command that plots the rows a run just wrote (printed at its end)."""
import os
from pathlib import Path

USAGE = """\
usage: python -m runners.sweep [-m] [key=value ...]      measure one point, or -m: every combination

  python -m runners.sweep seq=4096 variant=two_pass                           one point, one row
  python -m runners.sweep seq=256 batch=1 heads=2 head_dim=64 dtype=fp16      a point that fits a CPU
  python -m runners.sweep -m seq=1024,4096 causal=true,false variant=two_pass,fused    a sweep (-m)

main keys (defaults in conf/config.yaml; every key: docs/runner.md):
  variant=two_pass|atomic|fused|atomic_tma|ws   a design; sdpa_flash|sdpa_cudnn|flex|...: baselines (conf/variant/)
  seq= seq_k= batch= heads= kv_heads= head_dim= causal= dtype=bf16|fp16|fp32  the shape
  blocks.<field>=   block sizes (default: conf/block_defaults.yaml)   sweep=<preset>   a -m preset
  results_dir=results   resume=true   sweep_id=<name>   hydra/launcher=local_gpus|slurm (docs/scaling.md)

rows: one parquet file per point in <results_dir>/<gpu>/<sweep_id>/; a rerun skips points already recorded.
exit status: 0 all recorded, 2 config error, 3 a point crashed or timed out, 4 a point not recorded.

next:
  python -m plots.compare results=results/<gpu> dtype=<dtype>   TFLOPS vs sequence length (docs/plots.md)
  python -m plots.report results=results/<gpu>                  report.md with every table and figure
  python -m runners.regress baseline=<commit> results=results/<gpu>    against a baseline (docs/regression.md)

Hydra's help follows: config groups, the composed config, Hydra's flags.
"""


def shown(path) -> str:
    """A path as a user would type it: relative to the current folder when under it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


def plot_command(folders, dtype: str | None) -> str:
    """`python -m plots.compare results=<the folder holding all of them> [dtype=...]`."""
    common = os.path.commonpath([str(Path(f).resolve()) for f in folders])
    extra = f" dtype={dtype}" if dtype and dtype != "bf16" else ""  # plots.compare draws bf16 by default
    return f"plot: python -m plots.compare results={shown(common)}{extra}"
