#!/usr/bin/env python3
"""Merge alignment hits: reduce.py OUT HITS... ; checks each hit against the
query's known origin and writes the accuracy as the first line."""
import sys

out, parts = sys.argv[1], sys.argv[2:]
lines = sorted(line.strip() for p in parts for line in open(p) if line.strip())
right = sum(1 for line in lines if line.split()[0].split("_from_")[1] == line.split()[1])
with open(out, "w") as fh:
    fh.write(f"# queries {len(lines)} correct {right}\n")
    fh.write("\n".join(lines) + "\n")
