"""Median wall time of ``bayesify --help`` (and ``bayesify bench --help``) for two source trees,
run interleaved so machine noise hits both alike.

    git archive 1034dbf src | tar -x -C /tmp/old   # the code before lazy loading
    python benchmarks/cli_startup.py /tmp/old/src src --repeats 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CODE = "import sys; sys.argv = ['bayesify', *sys.argv[1:]]; from bayesify.cli import main; main()"


def wall(src: str, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", CODE, *args], env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--repeats", type=int, default=10)
    a = p.parse_args()
    for args in (["--help"], ["bench", "--help"]):
        times: dict[str, list[float]] = {a.before: [], a.after: []}
        for _ in range(a.repeats):
            for src in times:
                times[src].append(wall(src, args))
        b, n = (statistics.median(times[s]) for s in (a.before, a.after))
        print(f"bayesify {' '.join(args)}: before {b:.2f} s, after {n:.2f} s, {b / n:.1f}x")


if __name__ == "__main__":
    main()
