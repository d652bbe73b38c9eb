#!/usr/bin/env python3
"""Make query chunks: split.py DB NCHUNKS PER_CHUNK STAGE PREV_RESULT|- PREFIX

Each query is a 120-base window of a database sequence with 8% point
mutations; its name carries its origin (q<stage>_<i>_from_<db id>) so the
alignment result can be checked. Stage > 1 draws origins from the database
sequences the previous stage hit (a real data dependency between stages).
"""
import random
import sys

from seqio import read_fasta

db_path, nchunks, per, stage, prev, prefix = sys.argv[1:7]
nchunks, per, stage = int(nchunks), int(per), int(stage)
db = read_fasta(db_path)
origins = sorted(db)
if prev != "-":
    hit = sorted({line.split()[1] for line in open(prev) if not line.startswith("#")})
    origins = hit or origins
rng = random.Random(1000 + stage)
for c in range(1, nchunks + 1):
    with open(f"{prefix}.{c}", "w") as fh:
        for i in range(per):
            src = rng.choice(origins)
            seq = db[src]
            start = rng.randrange(0, len(seq) - 120)
            q = list(seq[start:start + 120])
            for j in range(len(q)):
                if rng.random() < 0.08:
                    q[j] = rng.choice("ACGT")
            fh.write(f">q{stage}_{c}_{i}_from_{src}\n{''.join(q)}\n")
