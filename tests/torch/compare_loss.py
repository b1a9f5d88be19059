#!/usr/bin/env python3
"""Compare the per-step losses of two ddp.py runs (issue 12: within 1e-5 relative).

    python3 tests/torch/compare_loss.py ncclgo.json nccl.json [--rtol 1e-5]

Prints, for "loss" (rank 0's batch) and "global_loss" (the rank average),

    LOSS-COMPARE key=loss steps=200 max_rel_diff=0 at_step=0 rtol=1e-05 a=... b=... result=OK

then one line LOSS-COMPARE-RESULT OK|FAIL. Relative difference per step:
|a - b| / max(|b|, 1e-30). Exit status 1 when any step differs by more than
rtol, a value is not finite, the step counts or the settings (seed, ranks,
batch, lr) differ, or either run reported errors. Standard library only.
"""

import argparse
import json
import math
import sys


def compare(a, b, rtol):
    """Return (max relative difference, its step, list of problems) for two loss lists."""
    problems = []
    if len(a) != len(b):
        problems.append(f"step counts differ: {len(a)} vs {len(b)}")
    worst, at = 0.0, 0
    for i, (x, y) in enumerate(zip(a, b)):
        if not (math.isfinite(x) and math.isfinite(y)):
            problems.append(f"step {i}: not finite ({x!r}, {y!r})")
            worst, at = math.inf, i
            continue
        rel = abs(x - y) / max(abs(y), 1e-30)
        if rel > worst:
            worst, at = rel, i
    if worst > rtol:
        problems.append(f"step {at}: relative difference {worst:.3g} > {rtol:g} "
                        f"({a[at]!r} vs {b[at]!r})")
    return worst, at, problems


def main(argv=None):
    p = argparse.ArgumentParser(description="compare two ddp.py loss files")
    p.add_argument("a", help="first run (e.g. ncclgo)")
    p.add_argument("b", help="reference run (e.g. NCCL)")
    p.add_argument("--rtol", type=float, default=1e-5)
    args = p.parse_args(argv)
    with open(args.a) as f:
        ra = json.load(f)
    with open(args.b) as f:
        rb = json.load(f)

    failed = False
    for key in ("seed", "ranks", "batch", "lr", "steps"):
        if ra.get(key) != rb.get(key):
            print(f"LOSS-COMPARE setting {key} differs: {ra.get(key)!r} vs {rb.get(key)!r}")
            failed = True
    for name, r in ((args.a, ra), (args.b, rb)):
        if r.get("errors_all_ranks"):
            print(f"LOSS-COMPARE {name} reported {r['errors_all_ranks']} errors")
            failed = True
        print(f"LOSS-COMPARE run {name}: nccl_version={r.get('nccl_version')} libnccl={r.get('libnccl')} "
              f"param_digest={r.get('param_digest')}")
    for key in ("loss", "global_loss"):
        if key not in ra or key not in rb:
            print(f"LOSS-COMPARE key={key} missing")
            failed = True
            continue
        worst, at, problems = compare(ra[key], rb[key], args.rtol)
        ok = not problems
        failed |= not ok
        av = ra[key][at] if at < len(ra[key]) else None
        bv = rb[key][at] if at < len(rb[key]) else None
        print(f"LOSS-COMPARE key={key} steps={min(len(ra[key]), len(rb[key]))} max_rel_diff={worst:.3g} "
              f"at_step={at} rtol={args.rtol:g} a={av!r} b={bv!r} result={'OK' if ok else 'FAIL'}")
        for pr in problems:
            print(f"LOSS-COMPARE key={key} {pr}")
    if ra.get("param_digest") != rb.get("param_digest"):
        print("LOSS-COMPARE note: final parameters are not bit-identical (allowed within rtol)")
    print(f"LOSS-COMPARE-RESULT {'FAIL' if failed else 'OK'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
