"""The results-table library: reading result tables without drawing. Pandas only, no matplotlib; runners never
import plots. Its public API is the names below; plots/ and runners.regress use them as
``from runners import tables as T``. A row is a *result* only when ``status == "ok"`` and ``correct`` is True;
every other row may only ever be shown as a failure.

    columns    the tables' vocabulary: column names, the designs and block fields of the variant registry
    args       key=value arguments of the table commands (UsageError: one line, exit status 2)
    results    result rows on disk: one parquet file per point, written and read back (runners.sweep writes them)
    reading    load: every row under a path, normalised (missing columns, flags, derived columns, join keys)
    keys       the keys that join rows across commits and GPUs
    cells      one cell as text or as a flag
    select     which rows: results, failures, the newest, the fastest config, a GPU, a dtype, a shape
    labels     rows as short text (shapes, blocks, model-step configs, GPU slugs)
    markdown   Markdown tables and the geometric mean
    merge      rows of many jobs and machines into one table (``python -m runners.merge``)
"""
from runners.tables.args import UsageError, cli, coerce, parse_args, require
from runners.tables.cells import as_bool, row_keys, text, text_value
from runners.tables.columns import (BASELINE_VARIANTS, BLOCK_FIELDS, CALL_KINDS, ENV_COLUMNS, EXPLAIN_COLUMNS,
                                    EXPLAIN_TEXT_COLUMNS, FLOP_CONVENTION, GPU, HOST_KIND, MEASURE_COLUMNS, PEAK,
                                    REFERENCE,
                                    SHAPE_COLUMNS, STEP_KIND, STEP_KIND_COLUMN, STEP_MEASURE_COLUMNS,
                                    STEP_TIMING_KEYS, SWITCH_FIELDS, TIMED_COLUMN, TRITON_VARIANTS, VARIANT_LABELS,
                                    VARIANT_ORDER,
                                    base_variant, baseline_variants, block_fields, is_triton, registered_variants,
                                    step_config_columns, switch_fields, triton_variants, variant_label,
                                    variant_order, variants_module)
from runners.tables.keys import (declared_defaults, fill_block_defaults, join_key, join_keys, row_blocks,
                                 step_join_key)
from runners.tables.labels import blocks_text, shape_text, slug, step_text
from runners.tables.markdown import geomean, markdown_table
from runners.tables.reading import load, normalize
from runners.tables.select import (best_config, is_call_row, is_failed, is_host_cost, is_model_step, is_result,
                                   is_timed, is_wrong, kernel_rows, latest,
                                   pct_peak, select_dtype, select_gpus, select_shape, step_rows, timed)

__all__ = [
    # columns
    "BASELINE_VARIANTS", "BLOCK_FIELDS", "CALL_KINDS", "ENV_COLUMNS", "EXPLAIN_COLUMNS", "EXPLAIN_TEXT_COLUMNS",
    "FLOP_CONVENTION",
    "GPU", "HOST_KIND", "MEASURE_COLUMNS", "PEAK", "REFERENCE", "SHAPE_COLUMNS", "STEP_KIND", "STEP_KIND_COLUMN",
    "STEP_MEASURE_COLUMNS", "STEP_TIMING_KEYS", "SWITCH_FIELDS", "TIMED_COLUMN", "TRITON_VARIANTS", "VARIANT_LABELS",
    "VARIANT_ORDER", "base_variant", "baseline_variants", "block_fields", "is_triton", "registered_variants",
    "step_config_columns", "switch_fields", "triton_variants", "variant_label", "variant_order", "variants_module",
    # args
    "UsageError", "cli", "coerce", "parse_args", "require",
    # cells
    "as_bool", "row_keys", "text", "text_value",
    # keys
    "declared_defaults", "fill_block_defaults", "join_key", "join_keys", "row_blocks", "step_join_key",
    # labels, markdown
    "blocks_text", "shape_text", "slug", "step_text", "geomean", "markdown_table",
    # reading
    "load", "normalize",
    # select
    "best_config", "is_call_row", "is_failed", "is_host_cost", "is_model_step", "is_result", "is_timed", "is_wrong",
    "kernel_rows",
    "latest", "pct_peak",
    "select_dtype", "select_gpus", "select_shape", "step_rows", "timed",
]
