"""The model-step benchmark (`python -m runners.model_step`): its config (config), the small decoder (decoder),
training agreement against a baseline (agreement) and the benchmark itself (step)."""
