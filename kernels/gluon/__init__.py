"""Gluon designs (`triton.experimental.gluon`): explicit layouts, shared memory, TMA, mbarriers and wgmma on
Hopper (sm90). They cannot run in the Triton interpreter; `runners.compile_check` compiles them on a CPU.
`compat` maps the Gluon names that differ between Triton releases (3.6 on the GPUs, the newest in CI)."""
