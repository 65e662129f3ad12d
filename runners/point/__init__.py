"""One point, from its config to its measured row: where it runs (env), its config checked (schema), its inputs
(varlen_inputs), what it would cost on the CPU interpreter (cpu_cost), its measurement (measure) and why it is as
fast as it is (profile). Imports nothing here: `env` decides TRITON_INTERPRET before anything imports `variants`."""
