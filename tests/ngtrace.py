#!/usr/bin/env python3
"""ngtrace.py: summarise the NGTRACE rows of a kernel set built with NG_TRACE.

A diagnostic kernel set (ncclgen build --Xnvcc=-DNG_TRACE=N, see
devicesrc/ng_device.h and docs/DEVELOPING.md) prints one row per kernel
(its first block) when the N-th kernel of a translation unit ends:

    NGTRACE idx rank nRanks smid comm gt0 gtEnd c1 c2 c3 c4 c5 c6 c7 gtWaited

This script reads such output (plain or gzip; lines may carry a prefix
such as "run3 ", which groups them) and prints per group and rank the
10th, 50th and 90th percentiles of the period between kernel starts, of
the time from the previous kernel's end to this one's wait returning, and
of the clock64 cycles between marks, and the SMs its first blocks ran on
(the three most frequent, as SM:count).

Usage: tests/ngtrace.py FILE...
"""
import collections
import gzip
import sys

# The marks in the order a kernel passes them (see ngTraceMark's callers).
PHASES = [(0, 1, "entry->comm"), (1, 2, "comm->waited"), (2, 6, "waited->F"), (6, 7, "F->steps loaded"),
          (7, 3, "steps->credit"), (3, 4, "exchange"), (4, 5, "tail"),
          (6, 5, "F->end")]


def quantiles(v):
    v = sorted(v)
    n = len(v)
    if n == 0:
        return "-"
    return "p10 %7.0f  p50 %7.0f  p90 %7.0f" % (v[n // 10], v[n // 2], v[9 * n // 10])


def read(paths):
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            for line in f:
                words = line.split()
                if "NGTRACE" not in words:
                    continue
                i = words.index("NGTRACE")
                prefix, fields = " ".join(words[:i]) or path, words[i + 1:]
                if len(fields) != 15:
                    continue
                rank, gt0, gt_end = int(fields[1]), int(fields[5]), int(fields[6])
                marks = [0] + [int(x) for x in fields[7:14]]
                groups[prefix][(fields[4], rank)].append((gt0, gt_end, marks, int(fields[14]), int(fields[3])))
    return groups


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for group, kernels in read(paths).items():
        print("==", group)
        for (comm, rank), rows in sorted(kernels.items(), key=lambda kv: kv[0][1]):
            rows.sort(key=lambda r: r[0])
            period = [b[0] - a[0] for a, b in zip(rows, rows[1:])]
            release = [b[3] - a[1] for a, b in zip(rows, rows[1:]) if b[3]]
            sms = collections.Counter(r[4] for r in rows).most_common(3)
            print(" rank %d (comm %s), %d kernels, SMs %s" % (rank, comm, len(rows),
                                                          " ".join("%d:%d" % sm for sm in sms)))
            print("   %-18s ns   %s" % ("period", quantiles(period)))
            print("   %-18s ns   %s" % ("prev end->waited", quantiles(release)))
            for a, b, name in PHASES:
                v = [r[2][b] - r[2][a] for r in rows if r[2][b] and (a == 0 or r[2][a])]
                print("   %-18s cyc  %s" % (name, quantiles(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
