"""An out-of-tree flash-bwd design: a kernel module and a variant module, registered by the `flash_bwd.variants`
entry point in ../pyproject.toml. Nothing is imported here: flash-bwd's registry loads `.variant` when it is asked
for its designs (variants/registry.py)."""
