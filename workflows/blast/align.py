#!/usr/bin/env python3
"""Align queries to the database: align.py DB QUERIES > HITS

BLAST in miniature: seed candidates by shared 8-mers, then score the best
few candidates with a local (Smith-Waterman) alignment. Pure CPU work.
Prints one line per query: query, best database hit, score.
"""
import sys

from seqio import read_fasta

K = 8


def kmers(s):
    return {s[i:i + K] for i in range(len(s) - K + 1)}


def smith_waterman(a, b, match=2, mismatch=-1, gap=-2):
    prev = [0] * (len(b) + 1)
    best = 0
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b, start=1):
            v = max(0, prev[j - 1] + (match if ca == cb else mismatch), prev[j] + gap, cur[j - 1] + gap)
            cur.append(v)
            if v > best:
                best = v
        prev = cur
    return best


db = read_fasta(sys.argv[1])
index = {name: kmers(seq) for name, seq in db.items()}
for qname, q in read_fasta(sys.argv[2]).items():
    qk = kmers(q)
    candidates = sorted(db, key=lambda n: (-len(qk & index[n]), n))[:3]
    scored = sorted(((smith_waterman(q, db[n]), n) for n in candidates), key=lambda x: (-x[0], x[1]))
    score, hit = scored[0]
    print(f"{qname} {hit} {score}")
