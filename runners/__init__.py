"""The runner. Its top holds the commands, one module each (`python -m runners.<name>`): sweep, tune, check,
regress, merge, model_step, compile_check, compiled_table, arch_defaults. Their libraries live in subpackages by
job: point (one point, config to row), isolation (worker processes, GPU leases, Slurm), tables (the results-table
library plots/ use), tuning, compile (compilation on a CPU), model (the model-step benchmark) and regression.
Nothing here is imported by variants/ or kernels/."""
