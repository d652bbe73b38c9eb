#!/usr/bin/env python3
"""Write a deterministic random DNA database: gendb.py OUT [N] [LENGTH]."""
import random
import sys

out, n, length = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300, int(sys.argv[3]) if len(sys.argv) > 3 else 400
rng = random.Random(42)
with open(out, "w") as fh:
    for i in range(n):
        fh.write(f">db{i}\n{''.join(rng.choice('ACGT') for _ in range(length))}\n")
