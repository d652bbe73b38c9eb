#!/usr/bin/env python3
"""Writes ./Makeflow: an I/O-bound workflow of N parallel `dd` tasks.

Each task writes a file of SIZE MiB of zeros with fsync, reads it back and
records its size and md5; `gather` checks every block. Usage:
`python3 make_makeflow.py [N] [SIZE_MB]` (default 16 tasks of 64 MiB).
"""
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
size = int(sys.argv[2]) if len(sys.argv) > 2 else 64
out = ["# I/O-bound workflow, written by make_makeflow.py", "",
       "CATEGORY=dd", "CORES=1", "MEMORY=100", f"DISK={size * 2 + 50}", ""]
for i in range(1, n + 1):
    out += [f"block{i}.md5:",
            f"\tdd if=/dev/zero of=blk bs=1M count={size} conv=fsync status=none && "
            f"dd if=blk of=/dev/null bs=1M status=none && "
            # no $(...): makeflow reads it as one of its own variables
            f"{{ stat -c %s blk; md5sum < blk | cut -c1-32; }} | paste -sd' ' > block{i}.md5 && rm -f blk", ""]
out += ["CATEGORY=gather", "CORES=1", "MEMORY=100", "DISK=50", "",
        f"blocks.txt: {' '.join(f'block{i}.md5' for i in range(1, n + 1))}",
        f"\tcat {' '.join(f'block{i}.md5' for i in range(1, n + 1))} | sort | uniq -c > blocks.txt", ""]
open("Makeflow", "w").write("\n".join(out))
