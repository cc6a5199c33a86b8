"""The calibration tables of docs/verdicts.md, printed as Markdown from `make bench-calibrate`'s output.

    .venv/bin/python bench/calibration_tables.py [bench/out/calibration.json]

Five tables, each pooling the grid's cells as its heading says:
- coverage and false calls per noise model and seeds (the paper's and the embedded shapes, windows f = 0.8 and 0.95);
- power at three seeds per shape, window and noise;
- `equivalent` claimed at the boundary effects (f = 0.95, every shape, noise and seeds);
- identical arms shown `equivalent`, and the false calls pooled per seeds.
A cell's rate over 40 trials carries about ±0.07 of sampling error at 0.95.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from statistics import mean
from typing import Any

BOUNDARY = ("a+0.02", "a-0.02", "cmid*1.15", "a+0.02@end")


def seeds_label(r: dict[str, Any]) -> str:
    return f"{r['seeds']} + stored spread" if r["floor"] == "stored" else str(r["seeds"])


def mean_min(values: Iterable[float | None], worst=min) -> str:
    got = [v for v in values if v is not None]
    return f"{mean(got):.2f} ({worst(got):.2f})" if got else "—"


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)])


def coverage_and_false_calls(rows: list[dict[str, Any]]) -> str:
    pooled = [r for r in rows if r["f"] in (0.8, 0.95)]
    noises = list(dict.fromkeys(r["noise"] for r in pooled))
    labels = list(dict.fromkeys(seeds_label(r) for r in sorted(pooled, key=lambda r: (r["seeds"], r["floor"]))))
    out = []
    for noise in noises:
        for label in labels:
            cell = [r for r in pooled if r["noise"] == noise and seeds_label(r) == label]
            if not cell:
                continue

            def of(effect: str, key: str, c=cell) -> list[float | None]:
                return [r[key] for r in c if r["effect"] == effect]

            out.append(
                [
                    noise,
                    label,
                    mean_min(r["coverage_A"] for r in cell),
                    mean_min(r["coverage_pred"] for r in cell),
                    mean_min(of("null", "false_call_rate"), worst=max),
                    mean_min(of("a+0.05", "power")),
                    mean_min(of("cmid/2", "power")),
                    mean_min(of("cmid/2", "ceiling_calls"), worst=max),
                    f"{mean(r['not_identified'] for r in cell if r['effect'] == 'null'):.2f}",
                ]
            )
    head = [
        "noise",
        "seeds",
        "coverage A: mean (min)",
        "coverage R@to: mean (min)",
        "false calls on null: mean (max)",
        "ceiling ↑ found, A+0.05",
        "efficiency ↑ found, C_mid/2",
        "ceiling calls on C_mid/2",
        "not identified",
    ]
    return table(head, out)


def power_at_three(rows: list[dict[str, Any]]) -> str:
    three = [r for r in rows if r["seeds"] == 3 and r["floor"] == "own" and r["f"] in (0.8, 0.95)]
    out = []
    keys = list(dict.fromkeys((r["shape"], r["f"], r["noise"]) for r in three))
    for shape, f, noise in keys:
        cell = {r["effect"]: r for r in three if (r["shape"], r["f"], r["noise"]) == (shape, f, noise)}

        def rate(effect: str, key: str = "power", c=cell) -> str:
            return f"{c[effect][key]:.2f}" if effect in c and c[effect][key] is not None else "—"

        out.append(
            [
                shape,
                f"f={f:g}",
                noise,
                rate("a+0.03"),
                rate("a+0.05"),
                rate("cmid/2"),
                rate("b*1.5"),
                rate("null", "false_call_rate"),
            ]
        )
    head = ["shape", "window", "noise", "ceiling ↑ found, A+0.03", "A+0.05", "efficiency ↑ found, C_mid/2", "B×1.5"]
    return table([*head, "false calls on null"], out)


def boundary(rows: list[dict[str, Any]]) -> str:
    out = []
    for effect in BOUNDARY:
        cells = [r for r in rows if r["effect"] == effect and r["f"] == 0.95]
        if not cells:
            continue
        claimed = [round(r["equivalent_rate"] * r["trials"]) for r in cells]
        trials = sum(r["trials"] for r in cells)
        worst = max(zip(claimed, cells), key=lambda t: t[0])
        w = worst[1]
        where = f"{worst[0]}/{w['trials']}" + (
            f" ({w['shape']}, {w['noise']}, {seeds_label(w)} seeds)" if worst[0] else ""
        )
        out.append([f"`{effect}`", f"{sum(claimed)} of {trials:,} ({sum(claimed) / trials:.2%})", where])
    return table(["boundary effect", "`equivalent` claimed", "worst cell"], out)


def null_equivalence(rows: list[dict[str, Any]]) -> str:
    null = [r for r in rows if r["effect"] == "null" and r["f"] == 0.95 and r["floor"] == "own"]
    out = []
    for shape in dict.fromkeys(r["shape"] for r in null):
        for noise in dict.fromkeys(r["noise"] for r in null):
            cell = sorted((r for r in null if (r["shape"], r["noise"]) == (shape, noise)), key=lambda r: r["seeds"])
            said = ", ".join(f"{round(r['equivalent_rate'] * r['trials'])}/{r['trials']}" for r in cell)
            out.append([shape, noise, ", ".join(str(r["seeds"]) for r in cell), said])
    return table(["shape", "noise", "seeds", "identical arms shown `equivalent`"], out)


def pooled_false_calls(rows: list[dict[str, Any]]) -> str:
    null = [r for r in rows if r["effect"] == "null"]
    out = []
    for label in dict.fromkeys(seeds_label(r) for r in sorted(null, key=lambda r: (r["seeds"], r["floor"]))):
        cell = [r for r in null if seeds_label(r) == label]
        calls = sum(round(r["false_call_rate"] * r["trials"]) for r in cell)
        trials = sum(r["trials"] for r in cell)
        out.append([label, f"{calls} of {trials:,} ({calls / trials:.1%})"])
    return table(["seeds", "false calls on null, pooled"], out)


def main(argv: list[str]) -> int:
    path = argv[0] if argv else "bench/out/calibration.json"
    with open(path) as fh:
        data = json.load(fh)
    rows = data["rows"] if isinstance(data, dict) else data
    for title, text in (
        ("Coverage and false calls (f = 0.8 and 0.95, every shape)", coverage_and_false_calls(rows)),
        ("Power at three seeds", power_at_three(rows)),
        ("`equivalent` at the boundary (f = 0.95)", boundary(rows)),
        ("Identical arms shown `equivalent` (f = 0.95)", null_equivalence(rows)),
        ("False calls on identical arms, pooled over shapes, windows and noise", pooled_false_calls(rows)),
    ):
        print(f"### {title}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
