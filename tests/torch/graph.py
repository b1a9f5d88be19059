#!/usr/bin/env python3
"""torch.cuda.graph over the NCCL library (issues 23 and 26): capture works and replays right.

Run under torchrun (1 or more processes):

    torchrun --standalone --nproc-per-node 2 tests/torch/graph.py [--replays 1000] [--batches 10]

Each rank captures, in one torch.cuda.graph (global capture mode, torch's
default), a group of collectives: all_reduce (sum, of float32 and of
8 bytes), all_gather_into_tensor, reduce_scatter_tensor and broadcast,
each reading an input buffer that is copied into its working tensor
inside the graph (torch's collectives are in place). Then, --batches
times, it writes new inputs (depending on the batch and the rank),
replays the graph --replays/--batches times and checks every output
exactly: a replay that read stale inputs, reused a stale work list or did
nothing fails. Finally it captures 100 all_reduces of 8 bytes and times
their replays (GRAPH-TIME us_per_collective=...). The capture must either
work or fail at once with an error; this script counts a failed capture
as a failure. Rank 0 prints

    TORCH-CHECKS passed=N failed=M ranks=W script=graph ...

and the exit status is 0 when nothing failed.
"""

import argparse
import datetime
import os
import sys
import time

import ncclinfo


def say(line):
    os.write(1, (line + "\n").encode())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--replays", type=int, default=1000)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--count", type=int, default=1023)
    p.add_argument("--time-loop", type=int, default=100, help="8-byte all_reduces in the timed graph")
    p.add_argument("--backend", default="nccl")
    ncclinfo.add_arguments(p)
    args = p.parse_args()
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"]) % max(torch.cuda.device_count(), 1)
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=120), device_id=dev)
    store = dist.distributed_c10d._get_default_store()
    passed = failed = 0

    def fail(what, detail):
        nonlocal failed
        failed += 1
        say(f"MISMATCH op={what} dtype=- count={args.count} rank={rank}: {detail}")

    warm = torch.ones(1, device=dev)
    dist.all_reduce(warm)
    info = ncclinfo.bound_nccl()
    for e in ncclinfo.check(info, args):
        fail("library", e)

    n = args.count
    f32 = torch.float32
    x_ar = torch.zeros(n, dtype=f32, device=dev)
    y_ar = torch.zeros(n, dtype=f32, device=dev)
    x_8 = torch.zeros(2, dtype=torch.int32, device=dev)  # 8 bytes
    y_8 = torch.zeros(2, dtype=torch.int32, device=dev)
    x_ag = torch.zeros(n, dtype=f32, device=dev)
    y_ag = torch.zeros(n * world, dtype=f32, device=dev)
    x_rs = torch.zeros(n * world, dtype=f32, device=dev)
    y_rs = torch.zeros(n, dtype=f32, device=dev)
    x_bc = torch.zeros(n, dtype=f32, device=dev)
    y_bc = torch.zeros(n, dtype=f32, device=dev)
    root = world - 1

    def body():
        y_ar.copy_(x_ar)
        dist.all_reduce(y_ar)
        y_8.copy_(x_8)
        dist.all_reduce(y_8)
        dist.all_gather_into_tensor(y_ag, x_ag)
        dist.reduce_scatter_tensor(y_rs, x_rs)
        y_bc.copy_(x_bc)
        dist.broadcast(y_bc, src=root)

    def inputs(b, r):
        i = torch.arange(n, dtype=torch.float64)
        return {
            "ar": (i % 7 + r + 3 * b) % 11,
            "8": torch.tensor([r + b, 2 * r - b], dtype=torch.float64),
            "ag": (i * 3 + r + b) % 13,
            "rs": (torch.arange(n * world, dtype=torch.float64) + 5 * r + b) % 17,
            "bc": (i + 7 * r + b) % 19,
        }

    # torch's advice: warm up on a side stream before capturing.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            body()
    except Exception as err:  # noqa: BLE001
        fail("capture", f"capturing the group failed: {err}")
        g = None
    torch.cuda.synchronize()

    if g is not None:
        per = max(args.replays // max(args.batches, 1), 1)
        for b in range(args.batches):
            mine = inputs(b, rank)
            x_ar.copy_(mine["ar"].to(f32))
            x_8.copy_(mine["8"].to(torch.int32))
            x_ag.copy_(mine["ag"].to(f32))
            x_rs.copy_(mine["rs"].to(f32))
            x_bc.copy_(mine["bc"].to(f32))
            for t in (y_ar, y_8, y_ag, y_rs, y_bc):
                t.fill_(-1)  # a replay that writes nothing is caught
            torch.cuda.synchronize()
            for _ in range(per):
                g.replay()
            torch.cuda.synchronize()
            every = [inputs(b, r) for r in range(world)]
            want = {
                "all_reduce": (y_ar, sum(e["ar"] for e in every).to(f32)),
                "all_reduce/8B": (y_8, sum(e["8"] for e in every).to(torch.int32)),
                "all_gather": (y_ag, torch.cat([e["ag"] for e in every]).to(f32)),
                "reduce_scatter": (y_rs, sum(e["rs"] for e in every)[rank * n:(rank + 1) * n].to(f32)),
                "broadcast": (y_bc, every[root]["bc"].to(f32)),
            }
            for what, (got, exp) in want.items():
                got = got.cpu()
                if torch.equal(got, exp):
                    passed += 1
                else:
                    bad = (got != exp).nonzero()
                    k = int(bad[0][0])
                    fail(what, f"batch {b} after {per} replays: {len(bad)} wrong, [{k}]={got[k].item()} want {exp[k].item()}")

    # Timing: --time-loop all_reduces of 8 bytes in one graph.
    t8 = torch.ones(2, dtype=torch.int32, device=dev)
    with torch.cuda.stream(s):
        dist.all_reduce(t8)
    torch.cuda.synchronize()
    tg = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(tg):
            for _ in range(args.time_loop):
                dist.all_reduce(t8)
        tg.replay()
        torch.cuda.synchronize()
        launches = 20
        start = time.perf_counter()
        for _ in range(launches):
            tg.replay()
        torch.cuda.synchronize()
        us = (time.perf_counter() - start) * 1e6 / (launches * args.time_loop)
        say(f"GRAPH-TIME rank={rank} us_per_collective={us:.2f} loop={args.time_loop} launches={launches}")
        passed += 1
    except Exception as err:  # noqa: BLE001
        fail("capture/time", f"capturing {args.time_loop} all_reduces failed: {err}")

    store.set(f"torchgraph/result{rank}", f"{passed} {failed}")
    total = failed
    if rank == 0:
        keys = [f"torchgraph/result{r}" for r in range(world)]
        tp = tf = 0
        try:
            store.wait(keys, datetime.timedelta(seconds=60))
            for k in keys:
                a, b = store.get(k).decode().split()
                tp, tf = tp + int(a), tf + int(b)
        except Exception as err:  # noqa: BLE001
            say(f"MISMATCH op=summary dtype=- count=0 rank=0: ranks did not report: {err}")
            tf += 1
        total = tf
        say(f"TORCH-CHECKS passed={tp} failed={tf} ranks={world} script=graph backend={args.backend} "
            f"{ncclinfo.describe(info)}")
    dist.barrier(device_ids=[local])
    dist.destroy_process_group()
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
