"""Render ``reports/bench.json`` as the Markdown tables of ``bench/RESULTS.md``.

    python -m bench.report reports/bench.json > /tmp/tables.md
    python -m bench.report reports/bench-busy.json  # the busy-host mode's report

The numbers in RESULTS.md are pasted from this output, so they are the measured ones.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .timing import fmt_met as _met
from .timing import fmt_ms as _ms
from .timing import fmt_x as _x


def _machine_lines(meta: dict[str, Any]) -> list[str]:
    """When, where and on which commit a report was measured (both report kinds)."""
    return [
        f"- date (UTC): {meta['date_utc']}; CPU: {meta['cpu']} ({meta['cores']} cores); torch "
        f"threads: {meta['torch_threads']}; load average (1 min) at start / end: "
        f"{meta.get('load_average_1m_at_start', float('nan')):.1f} / "
        f"{meta.get('load_average_1m_at_end', float('nan')):.1f}",
        f"- commit {meta.get('commit')} (last impl/ change {meta.get('impl_commit')}; "
        f"uncommitted in impl/ or bench/: {meta.get('impl_or_bench_uncommitted_changes')})",
    ]


def render(report: dict[str, Any]) -> str:
    meta = report["meta"]
    out = [
        *_machine_lines(meta),
        f"- Python {meta['python']}, torch {meta['torch']}, numpy {meta['numpy']}, "
        f"verl {meta['verl']} ({meta['verl_note']})",
        f"- repeats: impl and floor {meta['repeats']['fast']} (after 1 warm-up); verl "
        f"{meta['repeats']['verl']}; reference {meta['repeats']['reference']}; medians",
        "",
        "### Pack (median ms; `1` = rank 0 alone, `all` = every CP rank in turn)",
        "",
        "| B | tp | cp | bucket | data | rows/rank | impl 1 | impl all | impl 1 (nested in) | "
        "reference all | verl 1 | verl all | floor 1 | floor all | verl/impl (1) | "
        "impl/floor (1) | impl/floor (all) |",
        "|" + "---|" * 17,
    ]
    for c in report["cases"]:
        p, r = c["pack"], c["ratios"]
        out.append(
            f"| {c['B']} | {c['tp']} | {c['cp']} | {c['bucket'] or '-'} | {c['payload']} | "
            f"{c['local_rows']} | {_ms(p['impl_one'])} | {_ms(p['impl_all'])} | "
            f"{_ms(p.get('impl_nested_one'))} | {_ms(p.get('reference_all'))} | "
            f"{_ms(p.get('verl_one'))} | {_ms(p.get('verl_all'))} | {_ms(p['floor_one'])} | "
            f"{_ms(p['floor_all'])} | {_x(r['verl_over_impl_one'])} | "
            f"{_x(r['impl_over_floor_one'])} | {_x(r['impl_over_floor_all'])} |")
    out += [
        "",
        "### Unpack (median ms, every rank's rows back to B sequences)",
        "",
        "| B | tp | cp | bucket | data | impl | reference | verl | floor | verl/impl | "
        "impl/floor |",
        "|" + "---|" * 11,
    ]
    for c in report["cases"]:
        u, r = c["unpack"], c["ratios"]
        out.append(
            f"| {c['B']} | {c['tp']} | {c['cp']} | {c['bucket'] or '-'} | {c['payload']} | "
            f"{_ms(u['impl'])} | {_ms(u.get('reference'))} | {_ms(u.get('verl'))} | "
            f"{_ms(u['floor'])} | {_x(r['unpack_verl_over_impl'])} | "
            f"{_x(r['unpack_impl_over_floor'])} |")
    out += ["", "### Goals (B = 256, cp = 4, rank 0 calls; min / median / max over the 8 cases)",
            "", "| impl input | verl / impl min | median | goal >= 100 | impl / floor max | median "
            "| goal <= 5 | impl / (batch copy + floor) max |", "|---|---|---|---|---|---|---|---|"]
    for form, g in ((k, v) for k, v in report["goals"].items() if isinstance(v, dict)):
        out.append(f"| {form} | {_x(g['verl_over_impl_min'])} | "
                   f"{_x(g['verl_over_impl_median'])} | "
                   f"{_met(g['verl_speedup_met'])} | "
                   f"{_x(g['impl_over_floor_max'])} | {_x(g['impl_over_floor_median'])} | "
                   f"{_met(g['floor_met'])} | {_x(g.get('impl_over_cat_floor_max'))} |")
    if meta.get("malloc"):
        out += ["", f"Allocator: {meta['malloc']}."]
    oc = report["op_counts"]
    out += ["", "### Torch ops dispatched per call (cp = 4, bucket 512, [L, 8] float32)", "",
            "| call | B = 16 | B = 1024 |", "|---|---|---|"]
    for key in ("impl_pack", "impl_unpack", "verl_pack"):
        if key in oc["B=16"]:
            out.append(f"| {key} | {oc['B=16'][key]['total']} | {oc['B=1024'][key]['total']} |")
    fc = oc.get("fixed_cost_s")
    if fc:
        out += ["", f"Fixed cost of one call (B = 16 sequences of 8 tokens, cp = 4; median ms): "
                f"impl pack {_ms(fc['impl_pack'])}, impl unpack {_ms(fc['impl_unpack'])}, one "
                f"index_select {_ms(fc['floor'])}."]
    if "nested_index_s" in report:
        costs = ", ".join(f"{k} {v * 1e6:.0f}" for k, v in report["nested_index_s"].items())
        out += ["", "One `nested[i]` on a jagged nested tensor of 100-token sequences, as verl "
                f"reads each sequence (us): {costs}."]
    mem = report["memory"]
    out += ["", "### Peak memory per call (B = 1024, cp = 4, bucket 512, [L, 8] float32)", "",
            "| call | torch peak MiB | output MiB | peak / output |", "|---|---|---|---|"]
    for name, m in mem["torch_profiler"].items():
        out.append(f"| {name} | {m['peak_bytes'] / 2**20:.2f} | {m['output_bytes'] / 2**20:.2f} "
                   f"| {m['peak_over_output']:.2f} |")
    if "rss_subprocess" in mem:
        out += ["", "| rank-0 pack, fresh subprocess | RSS high-water mark added MiB | output MiB "
                "| ratio |", "|---|---|---|---|"]
        for name, m in mem["rss_subprocess"].items():
            if "error" in m:
                out.append(f"| {name} | error: {m['error']} | | |")
            else:
                out.append(f"| {name} | {m['added_bytes'] / 2**20:.2f} | "
                           f"{m['output_bytes'] / 2**20:.2f} | {m['added_over_output']:.2f} |")
    cuda = report["cuda"]
    out += ["", f"### CUDA: {cuda.get('skipped', cuda.get('device'))}"]
    return "\n".join(out)


def render_busy(report: dict[str, Any]) -> str:
    """The busy-host report (`python -m bench.run --busy`): idle and busy side by side."""
    meta, setup = report["meta"], report["busy_setup"]
    out = [
        *_machine_lines(meta),
        f"- Python {meta['python']}, torch {meta['torch']}, verl {meta['verl']} "
        f"({meta['verl_note']}); allocator: {meta.get('malloc')}",
        f"- busy = {setup['spinners']} spinning processes (one per core); "
        f"{setup['rounds']} alternating idle/busy rounds per case, each timing impl and the "
        f"floor {setup['repeats']['fast']} times and verl {setup['repeats']['verl']} times; "
        "medians of the pooled samples",
        "",
        "### Busy host: rank 0 pack, median ms (B = 256)",
        "",
        "| tp | cp | bucket | data | rows/rank | load idle / busy | impl idle | impl busy | "
        "impl nested idle | impl nested busy | verl idle | verl busy | floor idle | floor busy | "
        "busy/idle (nested) | impl/floor busy (nested) | busy/idle (list) | "
        "impl/floor busy (list) |",
        "|" + "---|" * 18,
    ]
    for c in report["busy_cases"]:
        i, b, r = c["idle"], c["busy"], c["ratios"]
        out.append(
            f"| {c['tp']} | {c['cp']} | {c['bucket'] or '-'} | {c['payload']} | "
            f"{c['local_rows']} | {c['load_1m']['idle']:.1f} / {c['load_1m']['busy']:.1f} | "
            f"{_ms(i['impl'])} | {_ms(b['impl'])} | {_ms(i['impl_nested'])} | "
            f"{_ms(b['impl_nested'])} | {_ms(i.get('verl'))} | {_ms(b.get('verl'))} | "
            f"{_ms(i['floor'])} | {_ms(b['floor'])} | {_x(r['impl_nested_busy_over_idle'])} | "
            f"{_x(r['impl_nested_over_floor_busy'])} | {_x(r['impl_busy_over_idle'])} | "
            f"{_x(r['impl_over_floor_busy'])} |")
    out += ["", "### Busy-host goals (B = 256, cp = 4, rank 0; max / median over the cases)", "",
            "| impl input | busy / idle max | median | goal <= 2 | impl / floor (busy) max | "
            "median | goal <= 5 |", "|---|---|---|---|---|---|---|"]
    for form, g in ((k, v) for k, v in report["busy_goals"].items() if isinstance(v, dict)):
        out.append(f"| {form} | {_x(g['busy_over_idle_max'])} | "
                   f"{_x(g['busy_over_idle_median'])} | {_met(g['busy_over_idle_met'])} | "
                   f"{_x(g['over_floor_busy_max'])} | {_x(g['over_floor_busy_median'])} | "
                   f"{_met(g['over_floor_busy_met'])} |")
    if all("fixed" in c["busy"] for c in report["busy_cases"]):
        out += _bound_lines(report)
    return "\n".join(out)


def _bound_lines(report: dict[str, Any]) -> list[str]:
    """What this design must pay, busy (bench/busy_mode.py): impl's fixed cost (B one-row
    sequences) plus one gather through the real row map, against the floor."""
    out = ["", "### What any pack of this design pays, busy (median ms; x = over the floor)", "",
           "| tp | cp | bucket | data | impl nested | fixed (B one-row seqs) | row-map gather | "
           "floor | fixed / floor | row-map / floor | (fixed + row-map) / floor | "
           "impl nested / (fixed + row-map) | ops impl / fixed |", "|" + "---|" * 13]
    for c in report["busy_cases"]:
        b, r, k = c["busy"], c["ratios"], c["checks"]
        out.append(
            f"| {c['tp']} | {c['cp']} | {c['bucket'] or '-'} | {c['payload']} | "
            f"{_ms(b['impl_nested'])} | {_ms(b['fixed'])} | {_ms(b['rowmap'])} | "
            f"{_ms(b['floor'])} | {_x(r['fixed_over_floor_busy'])} | "
            f"{_x(r['rowmap_over_floor_busy'])} | {_x(r['bound_over_floor_busy'])} | "
            f"{_x(r['impl_nested_over_bound_busy'])} | "
            f"{k.get('ops_impl_nested', '-')} / {k.get('ops_fixed', '-')} |")
    for payload, g in (report.get("busy_bound") or {}).items():
        if g.get("bound_over_floor_busy_max") is None:
            continue
        verdict = {True: "the 5x goal is out of reach for this design in at least one case",
                   False: "this bound does not rule the 5x goal out",
                   None: "no verdict: rows with trailing dims are gathered in torch's thread "
                         "pool, where the floor and the row-map gather each stall in some "
                         "rounds"}[g["floor_goal_ruled_out"]]
        out += ["", f"{payload}, B = 256, cp = 4: (fixed + row-map) / floor, busy, "
                f"{_x(g['bound_over_floor_busy_min'])}-{_x(g['bound_over_floor_busy_max'])}: "
                f"{verdict}."]
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = args[0] if args else "reports/bench.json"
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    print(render_busy(report) if "busy_cases" in report else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
