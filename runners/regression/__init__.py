"""The regression check (`python -m runners.regress`): measured rows point by point (measured), compiled-resources
tables (compiled), and which rows a git ref names (refs)."""
