#!/usr/bin/env python3
"""torch.distributed all_reduce timed per call, 8 B to 256 MiB (issue 23).

Run under torchrun (one process per GPU, or sharing GPUs under MPS):

    torchrun --standalone --nproc-per-node 2 tests/torch/latency.py \
        [--min 8] [--max 268435456] [--iters 200] [--warmup 20] \
        [--expect-nccl-version 2.28.7] [--expect-nccl-lib bundle/lib/libnccl.so.2]

For each size (powers of 4 from --min to --max bytes of float32; the last
size is always --max), every rank runs --warmup calls, then a barrier, then
--iters calls of dist.all_reduce on torch's current stream (the legacy
default stream, as a program that chose none has), timed with CUDA events
around the whole loop. The per-call time is the loop's time over --iters;
busbw uses nccl-tests' AllReduce factor 2(n-1)/n. Before timing, one call
checks its result exactly (integers in float32). Rank 0 prints

    TORCH-LAT bytes=8 us=... host_us=... algbw_GBs=... busbw_GBs=...

per size (the slowest rank's time, gathered after the timed loop by a max
all_reduce; host_us is the time the loop took to issue one call, which is
the per-call time whenever the host is the bottleneck) and TORCH-LAT-DONE sizes=N at the end. Exit 1 on a wrong result.
"""

import argparse
import os
import sys
import time

import ncclinfo


def parse_args():
    p = argparse.ArgumentParser(description="all_reduce time per call")
    p.add_argument("--min", type=int, default=8, help="smallest size in bytes")
    p.add_argument("--max", type=int, default=256 << 20, help="largest size in bytes")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--backend", default="nccl")
    ncclinfo.add_arguments(p)
    return p.parse_args()


def sizes(lo, hi):
    s, out = lo, []
    while s < hi:
        out.append(s)
        s *= 4
    out.append(hi)
    return out


def main():
    args = parse_args()
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    ngpu = torch.cuda.device_count()
    torch.cuda.set_device(local % ngpu)
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    if args.backend == "nccl":
        info = ncclinfo.bound_nccl()
        errs = ncclinfo.check(info, args)
        for e in errs:
            print(f"rank {rank}: {e}", flush=True)
        if errs:
            sys.exit(1)
        if rank == 0:
            print(f"TORCH-LIB {ncclinfo.describe(info)}", flush=True)
    dev = torch.device("cuda", torch.cuda.current_device()) if args.backend == "nccl" else torch.device("cpu")

    bad = 0
    for nbytes in sizes(args.min, args.max):
        count = max(1, nbytes // 4)
        x = torch.full((count,), float(rank + 1), dtype=torch.float32, device=dev)
        dist.all_reduce(x)
        want = float(n * (n + 1) // 2)
        if not bool((x == want).all()):
            bad += 1
            print(f"WRONG bytes={nbytes} rank={rank} got {x[0].item()} want {want}", flush=True)
        for _ in range(args.warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        h0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(x)
        host = (time.perf_counter() - h0) * 1e6 / args.iters
        end.record()
        end.synchronize()
        us = start.elapsed_time(end) * 1000.0 / args.iters
        t = torch.tensor([us, host], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        us, host = t[0].item(), t[1].item()
        if rank == 0:
            b = count * 4
            algbw = b / us / 1e3
            busbw = algbw * 2 * (n - 1) / n
            print(f"TORCH-LAT bytes={b} us={us:.2f} host_us={host:.2f} algbw_GBs={algbw:.2f} busbw_GBs={busbw:.2f}", flush=True)
    if rank == 0:
        print(f"TORCH-LAT-DONE sizes={len(sizes(args.min, args.max))} wrong={bad}", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
