"""Summarise the tally of a long run of ``tests/test_table_fuzz.py`` (``BAYESIFY_FUZZ_TALLY``
files, one JSON line per generated table) as the figures of ``benchmarks/table_fuzz.md``.

    python benchmarks/table_fuzz_tally.py /tmp/fuzz/seed*.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def main(paths: list[str]) -> None:
    records = [json.loads(line) for p in paths for line in Path(p).read_text("utf-8").splitlines()]
    kinds, columns, targets, formats = Counter(), Counter(), Counter(), Counter()
    methods, steps, failures, rows = Counter(), Counter(), Counter(), Counter()
    for r in records:
        plan = r["plan"]
        for _, kind in plan["columns"]:
            columns[kind] += 1
        for kind in {k for _, k in plan["columns"]}:
            kinds[kind] += 1
        targets[plan["target"][1]] += 1
        formats[plan["format"]] += 1
        methods[plan["method"]] += 1
        rows[plan["n"]] += 1
        for step, said in r["steps"].items():
            steps[step, "ok" if said == "ok" or said.endswith("skipped") else "refused"] += 1
        if "failure" in r:
            failures[r["failure"].strip().splitlines()[-1][:160]] += 1
    print(f"tables: {len(records)}; seconds in tables: {sum(r['seconds'] for r in records):.0f}")
    print("rows:", dict(sorted(rows.items())))
    print("formats:", dict(formats), "methods:", dict(methods))
    print("feature kinds (tables holding one, columns):")
    for kind, n in kinds.most_common():
        print(f"  {kind}: {n} tables, {columns[kind]} columns")
    print("targets:", dict(targets.most_common()))
    print("steps:", {f"{s} {o}": n for (s, o), n in sorted(steps.items())})
    print(f"failures: {sum(failures.values())}")
    for line, n in failures.most_common():
        print(f"  {n} x {line}")


if __name__ == "__main__":
    main(sys.argv[1:])
