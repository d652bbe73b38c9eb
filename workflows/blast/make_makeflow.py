#!/usr/bin/env python3
"""Writes ./Makeflow: the BLAST-shaped 3-stage workflow.

Each stage is split → align × width → reduce; stage s+1 splits its queries
from the database sequences stage s hit. Widths 16 / 2 / 10 give a wide, a
narrow and a middle stage, so an autoscaler must add workers, drain them and
add them again. Run `python3 make_makeflow.py [w1 w2 w3] [per_chunk | p1,p2,p3]` to change
them (queries per align task, one number or one per stage).
"""
import sys

widths = [int(x) for x in sys.argv[1:4]] if len(sys.argv) >= 4 else [16, 2, 10]
per_arg = sys.argv[4] if len(sys.argv) >= 5 else "60"
pers = [int(x) for x in per_arg.split(",")] if "," in per_arg else [int(per_arg)] * len(widths)
progs = "seqio.py"
out = ["# BLAST-shaped 3-stage workflow, written by make_makeflow.py", "",
       "CATEGORY=prepare", "CORES=1", "MEMORY=200", "DISK=200", "",
       "db.fa: gendb.py", "\tpython3 gendb.py db.fa", ""]
prev = "-"
for s, (w, per) in enumerate(zip(widths, pers), start=1):
    chunks = [f"q{s}.{c}" for c in range(1, w + 1)]
    hits = [f"hits{s}.{c}" for c in range(1, w + 1)]
    inputs = f"split.py {progs} db.fa" + ("" if prev == "-" else f" {prev}")
    out += ["CATEGORY=split", "CORES=1", "MEMORY=200", "DISK=200", "",
            f"{' '.join(chunks)}: {inputs}",
            f"\tpython3 split.py db.fa {w} {per} {s} {prev} q{s}", "",
            "CATEGORY=align", "CORES=1", "MEMORY=300", "DISK=200", ""]
    for c in range(1, w + 1):
        out += [f"hits{s}.{c}: align.py {progs} db.fa q{s}.{c}",
                f"\tpython3 align.py db.fa q{s}.{c} > hits{s}.{c}", ""]
    out += ["CATEGORY=reduce", "CORES=1", "MEMORY=200", "DISK=200", "",
            f"result{s}.txt: reduce.py {' '.join(hits)}",
            f"\tpython3 reduce.py result{s}.txt {' '.join(hits)}", ""]
    prev = f"result{s}.txt"
open("Makeflow", "w").write("\n".join(out))
