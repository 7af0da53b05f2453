#!/usr/bin/env python3
"""Reads the tables `gradsync bench allreduce` and its plain peers (bench/peers/) print, in
nccl-tests' form with a backend column first, and pairs rows of two backends by size.

    python3 bench/nccl_tables.py --a gs-1.txt gs-2.txt --b plain-1.txt plain-2.txt \
        [--a-backend gloo] [--b-backend gloo-plain]

prints, for each size both sides hold, each form's busbw for backend A and B (the median over
a side's tables: rounds run alternately) and A / B. A side's backend defaults to the first
backend of its first table. parse() is what tests/integration/test_bench_backends.py
checks the tables with: it raises ValueError naming the line that is not in the form.
"""
import argparse
import re
import statistics
import sys

NAMES = ["backend", "size", "count", "type", "redop", "root",
         "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"]
UNITS = ["(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "(us)", "(GB/s)", "(GB/s)"]
FORMS = ("out_of_place", "in_place")


def field_ends(line):
    """Where each whitespace-separated field of `line` ends: the columns are right-aligned."""
    return [m.end() for m in re.finditer(r"\S+", line)]


def parse(text):
    """{'rows': [{'backend', 'size', 'count', 'type', 'redop', 'root', 'out_of_place':
    {'time', 'algbw', 'busbw', 'wrong'}, 'in_place': {...}}], 'wrong': N, 'avg_busbw':
    {backend or '': GB/s}}. Every row's fields end where the column names end."""
    lines = text.splitlines()
    names = [i for i, line in enumerate(lines) if line.startswith("#") and line[1:].split() == NAMES]
    if len(names) != 1:
        raise ValueError("no single column-name line: # " + " ".join(NAMES))
    at = names[0]
    if at == 0 or lines[at - 1][1:].split() != ["out-of-place", "in-place"]:
        raise ValueError("the line above the column names is not '# ... out-of-place ... in-place'")
    if at + 1 >= len(lines) or lines[at + 1][1:].split() != UNITS:
        raise ValueError("the line below the column names is not the units row " + " ".join(UNITS))
    ends = field_ends(lines[at])[1:]  # without the '#'
    rows, wrong, averages = [], None, {}
    for line in lines[at + 2:]:
        if line.startswith("#"):
            m = re.fullmatch(r"# Out of bounds values : (\d+) (OK|FAILED)", line)
            if m:
                wrong = int(m.group(1))
            m = re.fullmatch(r"# Avg bus bandwidth    : (\S+) ?(\S*)", line)
            if m:
                averages[m.group(2)] = float(m.group(1))
            continue
        if not line.strip():
            continue
        cells = line.split()
        if len(cells) != len(NAMES) or field_ends(line) != ends:
            raise ValueError(f"row not under the column names: {line!r}")
        row = {"backend": cells[0], "size": int(cells[1]), "count": int(cells[2]),
               "type": cells[3], "redop": cells[4], "root": int(cells[5])}
        for form, first in zip(FORMS, (6, 10)):
            row[form] = {"time": float(cells[first]), "algbw": float(cells[first + 1]),
                         "busbw": float(cells[first + 2]), "wrong": float(cells[first + 3])}
        rows.append(row)
    if wrong is None or not averages:
        raise ValueError("no footer: '# Out of bounds values : N OK' and '# Avg bus bandwidth : X'")
    return {"rows": rows, "wrong": wrong, "avg_busbw": averages}


def busbw_by_size(paths, backend):
    """{size: {form: [busbw per file]}} for `backend` (default: the first file's first)."""
    by_size = {}
    for path in paths:
        with open(path) as f:
            rows = parse(f.read())["rows"]
        backend = backend or rows[0]["backend"]
        for r in rows:
            if r["backend"] == backend:
                for form in FORMS:
                    by_size.setdefault(r["size"], {}).setdefault(form, []).append(r[form]["busbw"])
    return backend, by_size


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", nargs="+", required=True, help="tables of side A (rounds)")
    parser.add_argument("--b", nargs="+", required=True, help="tables of side B (rounds)")
    parser.add_argument("--a-backend", help="A's backend column (default: its first)")
    parser.add_argument("--b-backend", help="B's backend column (default: its first)")
    args = parser.parse_args()
    name_a, a = busbw_by_size(args.a, args.a_backend)
    name_b, b = busbw_by_size(args.b, args.b_backend)
    print(f"# busbw (GB/s), median of {len(args.a)} and {len(args.b)} tables: "
          f"{name_a} against {name_b}")
    print(f"# {'size(B)':>10}  {'oop ' + name_a:>14}  {'oop ' + name_b:>14}  {'ratio':>6}"
          f"  {'ip ' + name_a:>14}  {'ip ' + name_b:>14}  {'ratio':>6}")
    for size in sorted(set(a) & set(b)):
        cells = []
        for form in FORMS:
            x, y = statistics.median(a[size][form]), statistics.median(b[size][form])
            cells.append(f"{x:14.2f}  {y:14.2f}  {x / y if y else float('nan'):6.2f}")
        print(f"  {size:10d}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
