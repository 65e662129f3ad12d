"""What `python -m runners.sweep --help` prints, without importing torch, Triton or the designs (under 2 s on a
2-core machine): the usage page, then the config groups and their options as the conf/ folder holds them. Hydra's
own help (the composed config, Hydra's flags) is `--hydra-help`, which composes the config and so imports them."""
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
HELP_FLAGS = ("--help", "-h")
CLI = False  # True in `python -m runners.sweep`: runners.sweep then imports the designs only once the keys are checked

USAGE = """\
usage: python -m runners.sweep [-m] [key=value ...]      measure one point, or -m: every combination

  python -m runners.sweep seq=4096 variant=two_pass                           one point, one row
  python -m runners.sweep seq=256 batch=1 heads=2 head_dim=64 dtype=fp16      a point that fits a CPU
  python -m runners.sweep -m seq=1024,4096 causal=true,false variant=two_pass,fused    a sweep (-m)

main keys (defaults in conf/config.yaml; every key: docs/runner.md):
  variant=two_pass|atomic|fused|atomic_tma|ws   a design; sdpa_flash|sdpa_cudnn|flex|fa4|...: baselines (conf/variant/)
  seq= seq_k= batch= heads= kv_heads= head_dim= causal= dtype=bf16|fp16|fp32  the shape
  blocks.<field>=   block sizes (default: conf/block_defaults.yaml)   sweep=<preset>   a -m preset
  results_dir=results   resume=true   sweep_id=<name>   hydra/launcher=local_gpus|slurm (docs/scaling.md)

rows: one parquet file per point in <results_dir>/<gpu>/<sweep_id>/; a rerun skips points already recorded.
exit status: 0 all recorded, 2 config error, 3 a point crashed or timed out, 4 a point not recorded.

next:
  python -m plots.compare results=results/<gpu> dtype=<dtype>   TFLOPS vs sequence length (docs/plots.md)
  python -m plots.report results=results/<gpu>                  report.md with every table and figure
  python -m runners.regress baseline=<commit> results=results/<gpu>    against a baseline (docs/regression.md)
"""


def asks_for_help(argv: list[str]) -> bool:
    return any(arg in HELP_FLAGS for arg in argv)


def groups_text(conf_dir: Path = CONF_DIR) -> str:
    """'== Configuration groups ==' and one line per group (folder of conf/) with its options (yaml files)."""
    lines = ["== Configuration groups ==", "Compose your configuration from those groups (group=option)", ""]
    for group in sorted(p for p in conf_dir.rglob("*") if p.is_dir() and any(p.glob("*.yaml"))):
        options = ", ".join(sorted(f.stem for f in group.glob("*.yaml")))
        lines.append(f"{group.relative_to(conf_dir).as_posix()}: {options}")
    return "\n".join(lines)


def print_help() -> None:
    print(USAGE)
    print(groups_text())
    print("\nvariant= also takes a design registered by a plugin (plugins=[module]); every key with its default:"
          "\n  python -m runners.sweep --cfg job        Hydra's own help: python -m runners.sweep --hydra-help")
