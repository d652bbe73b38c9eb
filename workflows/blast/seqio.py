"""Tiny FASTA helpers shared by the BLAST-shaped workflow's programs."""


def read_fasta(path):
    name, seqs = None, {}
    for line in open(path):
        line = line.strip()
        if line.startswith(">"):
            name = line[1:]
            seqs[name] = ""
        elif name is not None:
            seqs[name] += line
    return seqs
