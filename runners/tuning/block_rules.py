"""Study winners -> rules of conf/block_defaults.yaml (runners.tune write_defaults=true, docs/tuning.md).

For one variant, every study's rows (the `study` column) are grouped by (compute capability, head_dim, causal,
dtype); a group's winner is the fastest correct row at its longest sequence. Each winner becomes the rule
`when: {head_dim_max: D, causal: c}` (plus `dtype` when studies of several dtypes share D and causal) of its
compute capability ("any" for CPU-interpreter rows):
- a rule with exactly that `when` gets the winner's blocks (so does a rule with that `when` plus a `seq_min`
  when it serves the winner's `seq`: the hand-written length split stays, the measured length gets the winner);
- otherwise the new rule goes right before the rule that serves the shape today (first match wins), so it
  takes over the shapes with head_dim <= D that the later rules served and nothing else (the serving rule is
  looked up at the winner's `seq`).
A rule lists the fields the serving rule lists plus every field whose winner value differs from the Blocks
dataclass default. Only that variant's rule list of that architecture is rewritten in the file's text
(comments elsewhere are kept); an `any: *alias` or a missing architecture gets its own full section.
The unified diff is printed; the new table is checked (it parses, and every winner is what a lookup now
returns) before it is written.
"""
from __future__ import annotations

import copy
import difflib
import re
from dataclasses import fields
from pathlib import Path

import pandas as pd
import yaml

from runners.tuning import trials as T

ANY = "any"
_TOP_KEY = re.compile(r'^("?)([^\s:"#][^:"]*)\1:\s*(.*)$')


def arch_of(value) -> str:
    return ANY if value is None or value != value or str(value) in ("", "None") else str(value)


def winners(df: pd.DataFrame, variant: str) -> list[dict]:
    """[{arch, head_dim, causal, dtype, row}] of every study of `variant` in the rows."""
    rows = T.study_rows(df)
    if rows.empty:
        return []
    rows = rows[(rows["variant"] == variant) & (rows["status"] == T.OK) & rows["correct"].fillna(False).astype(bool)]
    rows = rows.assign(_arch=[arch_of(v) for v in rows.get("compute_capability", [None] * len(rows))])
    found = []
    for (arch, head_dim, causal, dtype), group in rows.groupby(["_arch", "head_dim", "causal", "dtype"], sort=True):
        longest = group[group["seq"] == group["seq"].max()]
        best = longest.loc[longest["ms"].idxmin()].to_dict()
        found.append({"arch": arch, "head_dim": int(head_dim), "causal": bool(causal), "dtype": str(dtype),
                      "row": best})
    return found


def _winner_problem(w: dict):
    """The problem a winner was measured on, as the table's rules see it (head dim, length, causal, dtype)."""
    from variants.problem import DTYPES, Problem

    seq = int(w["row"]["seq"])
    return Problem(1, seq, seq, 1, 1, w["head_dim"], w["causal"], DTYPES[w["dtype"]], "cpu")


def _without_seq(when: dict) -> dict:
    return {key: value for key, value in when.items() if key != "seq_min"}


def _rule_blocks(blocks_cls, row: dict, serving: dict | None) -> dict:
    listed = set((serving or {}).get("blocks", {}))
    out = {}
    for f in fields(blocks_cls):
        value = T.plain_value(row[f.name])
        if isinstance(f.default, bool):
            value = bool(value)
        elif isinstance(f.default, int):
            value = int(value)
        if f.name in listed or value != f.default:
            out[f.name] = value
    return out


def merged_rules(rules: list, found: list[dict], blocks_cls) -> list:
    """The variant's rules of one architecture with the winners written in."""
    from variants.block_defaults import rule_holds

    rules = copy.deepcopy(list(rules or []))
    shared = {}
    for w in found:
        shared.setdefault((w["head_dim"], w["causal"]), set()).add(w["dtype"])
    for w in found:
        when = {"head_dim_max": w["head_dim"], "causal": w["causal"]}
        if len(shared[(w["head_dim"], w["causal"])]) > 1:
            when["dtype"] = w["dtype"]
        problem = _winner_problem(w)
        serving = next((i for i, r in enumerate(rules) if rule_holds(r.get("when") or {}, problem)), None)
        if serving is not None and _without_seq(rules[serving].get("when") or {}) == when:
            exact = serving  # a `seq_min` rule of this shape serves the winner's length: it takes the winner
        else:
            exact = next((i for i, r in enumerate(rules) if (r.get("when") or {}) == when), None)
        base = rules[exact if exact is not None else serving] if (exact, serving) != (None, None) else None
        rule = {"when": rules[exact]["when"] if exact is not None else when,
                "blocks": _rule_blocks(blocks_cls, w["row"], base)}
        if exact is not None:
            rules[exact] = rule
        elif serving is not None:
            rules.insert(serving, rule)
        else:
            rules.append(rule)
    return rules


def _flow(mapping: dict) -> str:
    return yaml.safe_dump(mapping, default_flow_style=True, sort_keys=False, width=10**6).strip()


def render_rules(rules: list) -> list[str]:
    lines = []
    for rule in rules:
        lines.append(f"    - when: {_flow(rule.get('when') or {})}\n")
        lines.append(f"      blocks: {_flow(rule.get('blocks') or {})}\n")
        if rule.get("source"):  # compile_checked rules stay marked (a measured winner's rule has no source)
            lines.append(f"      source: {rule['source']}\n")
    return lines


def render_section(arch: str, section: dict) -> list[str]:
    lines = [f'"{arch}":\n' if re.fullmatch(r"[\d.]+", arch) else f"{arch}:\n"]
    for variant, rules in section.items():
        lines.append(f"  {variant}:\n")
        lines.extend(render_rules(rules))
    return lines


def _top_keys(lines: list[str]) -> list[tuple[int, str, str]]:
    keys = []
    for i, line in enumerate(lines):
        m = _TOP_KEY.match(line)
        if m and not line.startswith((" ", "#", "-")):
            keys.append((i, m.group(2), m.group(3).split("#")[0].strip()))
    return keys


def edit_text(text: str, table: dict, arch: str, variant: str, rules: list) -> str:
    """`text` with `variant`'s rule list of `arch` replaced by `rules` (see the module docstring)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    keys = _top_keys(lines)
    where = next((k for k in keys if k[1] == arch), None)
    if where is None or where[2].startswith("*"):  # missing, or an alias of another section: a full section
        section = copy.deepcopy(table.get(arch) or table.get(ANY) or {})
        section[variant] = rules
        new = render_section(arch, section)
        if where is None:
            return "".join(lines + (["\n"] if lines and lines[-1].strip() else []) + new)
        return "".join(lines[:where[0]] + new + lines[where[0] + 1:])
    start = where[0] + 1
    end = next((k[0] for k in keys if k[0] > where[0]), len(lines))
    head = next((i for i in range(start, end) if re.match(rf"^  {re.escape(variant)}:", lines[i])), None)
    if head is None:  # the architecture has no rules for the variant yet: append them to its section
        last = end
        while last > start and not lines[last - 1].strip():
            last -= 1
        return "".join(lines[:last] + [f"  {variant}:\n"] + render_rules(rules) + lines[last:])
    stop = head + 1
    while stop < end and (not lines[stop].strip() or len(lines[stop]) - len(lines[stop].lstrip()) > 2):
        stop += 1
    while stop > head + 1 and not lines[stop - 1].strip():  # blank lines after the list stay
        stop -= 1
    return "".join(lines[:head + 1] + render_rules(rules) + lines[stop:])


def _check(new_table: dict, variant: str, found: list[dict], blocks_cls) -> None:
    from variants.block_defaults import default_block_fields

    for w in found:
        got = default_block_fields(variant, _winner_problem(w), {ANY: new_table[w["arch"]]})
        resolved = blocks_cls(**got).as_dict()
        want = {f.name: T.plain_value(w["row"][f.name]) for f in fields(blocks_cls)}
        if any(resolved[k] != want[k] for k in want):
            raise RuntimeError(f"block_defaults: the new rules would not give the winner for {w}: {got}")


def write_defaults(df: pd.DataFrame, variant: str, path: str | Path, out=print) -> str:
    """Writes the winners of `variant`'s studies into the table at `path`; returns (and prints) the diff."""
    import variants
    from variants import block_defaults

    blocks_cls = variants.get(variant).Blocks
    found = winners(df, variant)
    path = Path(path)
    if not found:
        out(f"write_defaults: no correct study rows of variant {variant!r}; {path} unchanged")
        return ""
    old = path.read_text()
    text, table = old, yaml.safe_load(old)
    for arch in sorted({w["arch"] for w in found}):
        mine = [w for w in found if w["arch"] == arch]
        for w in mine:
            out(f"write_defaults: {arch} {variant} head_dim={w['head_dim']} causal={str(w['causal']).lower()} "
                f"{w['dtype']}: {w['row']['blocks_json']} ({w['row']['ms']:.4g} ms, study {w['row']['study']}, "
                f"seq={w['row']['seq']})")
        current = (table.get(arch) or table.get(ANY) or {}).get(variant, [])
        text = edit_text(text, table, arch, variant, merged_rules(current, mine, blocks_cls))
        table = yaml.safe_load(text)
    _check(table, variant, found, blocks_cls)
    diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), text.splitlines(keepends=True),
                                        fromfile=f"{path} (before)", tofile=f"{path} (written)"))
    if not diff:
        out(f"write_defaults: {path} already holds these winners (no change)")
        return ""
    path.write_text(text)
    block_defaults.load_table.cache_clear()
    out(diff.rstrip("\n"))
    out(f"write_defaults: wrote {path}; review with `git diff {path}`")
    return diff
