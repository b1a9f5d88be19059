#!/usr/bin/env python3
"""The rest of what torch's ProcessGroupNCCL offers, against exact values (issue 23).

Run under torchrun like collectives.py (whose Checker, output lines and
library check it shares):

    torchrun --standalone --nproc-per-node 2 tests/torch/extra.py [--device-id] \
        [--expect-nccl-version 2.28.7] [--expect-nccl-lib bundle/lib/libnccl.so.2]

Checks what collectives.py does not: every dtype that maps to an NCCL type
(int8, uint8, int32, int64, float16, bfloat16, float32, float64) through
all_reduce (sum, product, min, max), reduce to every root, all_gather into a
list, gather and scatter, async work handles (async_op=True, several in
flight, then wait), the object collectives (all_gather_object, gather_object,
broadcast_object_list, scatter_object_list), split_group (ncclCommSplit; it
needs --device-id, eager init), a new_group of the even ranks, and at the
end destroy_process_group followed by a second init_process_group and an
all_reduce on the new world. Rank 0 prints

    TORCH-CHECKS passed=N failed=M ranks=W script=extra ...

Exit status 1 on any failure.
"""

import argparse
import datetime
import os
import sys

import collectives
import ncclinfo

say = collectives.say

INT_DTYPES = ("int8", "uint8", "int32", "int64")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
COUNTS = "1,1027,262147"


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch NCCL: dtypes, rooted ops, async, objects, split, re-init")
    p.add_argument("--counts", default=COUNTS)
    p.add_argument("--device-id", action="store_true", help="eager init (device_id); enables split_group")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--backend", default="nccl", help="gloo runs on the CPU, to test this script")
    ncclinfo.add_arguments(p)
    return p.parse_args()


def main():
    args = parse_args()
    import torch
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    gpu = args.backend == "nccl"
    if gpu:
        local %= max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    timeout = datetime.timedelta(seconds=120)

    def init():
        kw = {"device_id": dev} if (args.device_id and gpu) else {}
        dist.init_process_group(args.backend, timeout=timeout, **kw)

    init()
    store = dist.distributed_c10d._get_default_store()
    barrier_kw = {"device_ids": [local]} if gpu else {}
    c = collectives.Checker(rank, args.verbose)
    counts = [int(x) for x in args.counts.split(",") if x]

    warm = torch.ones(1, device=dev)
    dist.all_reduce(warm)
    info = ncclinfo.bound_nccl()
    for e in (ncclinfo.check(info, args) if gpu else []):
        c.fail("library", "-", 0, e)

    def idx(n):
        return torch.arange(n, dtype=torch.float64)

    def small(r, n):  # 1..4: sums over 4 ranks stay exact in int8
        return idx(n) % 3 + 1 + (r % 2)

    def twos(r, n):  # 1 or 2: a product over 4 ranks stays within int8
        return (idx(n) + r) % 2 + 1

    def signed(r, n):
        return (idx(n) * 7 + r * 5) % 9 - 4

    def on_dev(x, dt):
        return x.to(dt).to(dev)

    def name(dt):
        return str(dt).replace("torch.", "")

    dtypes = [getattr(torch, d) for d in INT_DTYPES + FLOAT_DTYPES]
    for dt in dtypes:
        unsigned = dt == torch.uint8
        for n in counts:
            for opname, op in (("sum", ReduceOp.SUM), ("product", ReduceOp.PRODUCT),
                               ("min", ReduceOp.MIN), ("max", ReduceOp.MAX)):
                def case(dt=dt, n=n, opname=opname, op=op):
                    pat = {"sum": small, "product": twos}.get(opname, small if unsigned else signed)
                    ins = torch.stack([pat(r, n) for r in range(world)])
                    want = {"sum": ins.sum(0), "product": ins.prod(0), "min": ins.amin(0), "max": ins.amax(0)}[opname]
                    t = on_dev(ins[rank], dt)
                    dist.all_reduce(t, op=op)
                    c.compare(f"all_reduce/{opname}", name(dt), n, t, want)
                c.run(f"all_reduce/{opname}", name(dt), n, case)

            for root in range(world):
                def case_r(dt=dt, n=n, root=root):
                    ins = [small(r, n) for r in range(world)]
                    t = on_dev(ins[rank], dt)
                    dist.reduce(t, dst=root, op=ReduceOp.SUM)
                    if rank == root:
                        c.compare(f"reduce/root{root}", name(dt), n, t, sum(ins))
                    else:
                        c.ok(f"reduce/root{root}", name(dt), n)
                c.run(f"reduce/root{root}", name(dt), n, case_r)

            def case_ag(dt=dt, n=n):
                outs = [torch.zeros(n, dtype=dt, device=dev) for _ in range(world)]
                dist.all_gather(outs, on_dev(small(rank, n), dt))
                c.compare("all_gather(list)", name(dt), n, torch.cat(outs), torch.cat([small(r, n) for r in range(world)]))
            c.run("all_gather(list)", name(dt), n, case_ag)

            root = n % world

            def case_g(dt=dt, n=n, root=root):
                outs = [torch.zeros(n, dtype=dt, device=dev) for _ in range(world)] if rank == root else None
                dist.gather(on_dev(small(rank, n), dt), gather_list=outs, dst=root)
                if rank == root:
                    c.compare("gather", name(dt), n, torch.cat(outs), torch.cat([small(r, n) for r in range(world)]))
                else:
                    c.ok("gather", name(dt), n)
            c.run("gather", name(dt), n, case_g)

            def case_s(dt=dt, n=n, root=root):
                ins = [on_dev(small(r, n) + r, dt) for r in range(world)] if rank == root else None
                out = torch.zeros(n, dtype=dt, device=dev)
                dist.scatter(out, scatter_list=ins, src=root)
                c.compare("scatter", name(dt), n, out, small(rank, n) + rank)
            c.run("scatter", name(dt), n, case_s)

    # Async work handles: several collectives in flight, then wait on each.
    n = counts[-1]

    def case_async():
        ts = [on_dev(small(rank, n) * (k + 1), torch.float32) for k in range(4)]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        outs = [torch.zeros(n, device=dev) for _ in range(world)]
        works.append(dist.all_gather(outs, on_dev(small(rank, n), torch.float32), async_op=True))
        for w in works:
            w.wait()
        for k, t in enumerate(ts):
            c.compare(f"async/all_reduce{k}", "float32", n, t, sum(small(r, n) for r in range(world)) * (k + 1))
        c.compare("async/all_gather", "float32", n, torch.cat(outs), torch.cat([small(r, n) for r in range(world)]))
        if not all(w.is_completed() for w in works):
            c.fail("async/is_completed", "-", n, "a waited work is not completed")
    c.run("async", "float32", n, case_async)

    # Object collectives.
    def case_obj():
        mine = {"rank": rank, "payload": list(range(rank + 3))}
        got = [None] * world
        dist.all_gather_object(got, mine)
        want = [{"rank": r, "payload": list(range(r + 3))} for r in range(world)]
        (c.ok if got == want else lambda *a: c.fail(*a, f"got {got}"))("all_gather_object", "-", 0)
        g = [None] * world if rank == 0 else None
        dist.gather_object(mine, g, dst=0)
        if rank == 0:
            (c.ok if g == want else lambda *a: c.fail(*a, f"got {g}"))("gather_object", "-", 0)
        lst = [("from", world - 1), {"k": 1.5}] if rank == world - 1 else [None, None]
        dist.broadcast_object_list(lst, src=world - 1)
        (c.ok if lst == [("from", world - 1), {"k": 1.5}] else lambda *a: c.fail(*a, f"got {lst}"))(
            "broadcast_object_list", "-", 0)
        out = [None]
        dist.scatter_object_list(out, [f"to{r}" for r in range(world)] if rank == 0 else None, src=0)
        (c.ok if out == [f"to{rank}"] else lambda *a: c.fail(*a, f"got {out}"))("scatter_object_list", "-", 0)
    c.run("objects", "-", 0, case_obj)

    # new_group of the even ranks (the others must still call new_group).
    evens = list(range(0, world, 2))
    g_even = dist.new_group(evens)

    def case_even():
        if rank in evens:
            t = on_dev(small(rank, n), torch.float32)
            dist.all_reduce(t, group=g_even)
            c.compare("new_group(evens)", "float32", n, t, sum(small(r, n) for r in evens))
        else:
            c.ok("new_group(evens)", "float32", n)
    c.run("new_group(evens)", "float32", n, case_even)

    # split_group: ncclCommSplit of the default group's communicator (eager init only).
    if args.device_id and gpu and hasattr(dist, "split_group"):
        halves = [list(range(0, world, 2)), list(range(1, world, 2))] if world > 1 else [[0]]
        halves = [h for h in halves if h]

        def case_split():
            sg = dist.split_group(split_ranks=halves, timeout=timeout)
            mine = next(h for h in halves if rank in h)
            t = on_dev(small(rank, n), torch.float32)
            dist.all_reduce(t, group=sg)
            c.compare("split_group/all_reduce", "float32", n, t, sum(small(r, n) for r in mine))
            dist.destroy_process_group(sg)
        c.run("split_group", "float32", n, case_split)

    if gpu:
        torch.cuda.synchronize()
    dist.barrier(**barrier_kw)
    passed, failed = c.passed, c.failed

    # destroy_process_group, then a second world: ncclCommFinalize/Destroy, a new id, a new init.
    def case_reinit():
        dist.destroy_process_group()
        # torch keeps the first group's unique id under the same store key,
        # so a rank that reads it before rank 0 has written the new one
        # dials a root that is gone: the stock NCCL fails so too
        # ("connect ... returned Connection refused"). A store prefix of
        # its own gives the second group fresh keys.
        kw = {"device_id": dev} if (args.device_id and gpu) else {}
        dist.init_process_group(args.backend, timeout=timeout, store=dist.PrefixStore("reinit", store),
                                rank=rank, world_size=world, **kw)
        t = on_dev(small(rank, n), torch.float32)
        dist.all_reduce(t)
        c.compare("reinit/all_reduce", "float32", n, t, sum(small(r, n) for r in range(world)))
    c.run("reinit", "float32", n, case_reinit)

    store = dist.distributed_c10d._get_default_store() if dist.is_initialized() else store
    store.set(f"torchextra/result{rank}", f"{c.passed} {c.failed}")
    say(f"TORCH-CHECKS-RANK rank={rank} passed={c.passed} failed={c.failed} script=extra")
    total = c.failed
    if rank == 0:
        keys = [f"torchextra/result{r}" for r in range(world)]
        passed = failed = 0
        try:
            store.wait(keys, datetime.timedelta(seconds=60))
            for k in keys:
                p, f = store.get(k).decode().split()
                passed, failed = passed + int(p), failed + int(f)
        except Exception as err:  # noqa: BLE001
            say(f"MISMATCH op=summary dtype=- count=0 rank=0: ranks did not report: {err}")
            failed += 1
        total = failed
        say(f"TORCH-CHECKS passed={passed} failed={failed} ranks={world} script=extra backend={args.backend} "
            f"{ncclinfo.describe(info)}")
    if dist.is_initialized():
        dist.barrier(**barrier_kw)
        dist.destroy_process_group()
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
