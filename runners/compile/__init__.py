"""Compilation on a CPU, no GPU: per-architecture limits (arch_limits), the compiled resources of a design's
kernels (resources, and the Gluon forward's: forward; the command line of `python -m runners.compile_check`:
command), the table of one commit (table: `python -m runners.compiled_table`) and default blocks chosen by
compiling (arch_defaults: `python -m runners.arch_defaults`)."""
