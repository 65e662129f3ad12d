"""The tuner's library (`python -m runners.tune`): the Optuna samplers (search), a study rebuilt from its rows
(trials), and study winners written back as rules of conf/block_defaults.yaml (block_rules)."""
