#!/usr/bin/env python3
"""PyTorch's NCCL backend against exact expected values (issue 12).

Run under torchrun, one GPU per process (device = LOCAL_RANK):

    torchrun --standalone --nproc-per-node 2 tests/torch/collectives.py \
        [--expect-nccl-version 2.28.7] [--expect-nccl-lib bundle/lib/libnccl.so.2]

Checks all_reduce (sum, avg, max), broadcast (every root),
all_gather_into_tensor, reduce_scatter_tensor (sum, max), all_to_all_single
(equal and uneven splits), send/recv (blocking and batch_isend_irecv rings),
barrier (it must hold the other ranks until rank 0 arrives) and new_group
(all ranks, and one group per rank), in float32, bfloat16 and float16, at
several counts. Inputs depend on the rank and index and are small integers
(or halves), exact in every dtype; the expected values are computed on the
host in float64 from every rank's inputs and must match exactly (avg over a
world size that is not a power of two: within a few ulps). Every mismatch
prints a MISMATCH line naming the op, dtype, count and rank. Rank 0 prints

    TORCH-CHECKS passed=N failed=M ranks=W backend=nccl nccl_version=X libnccl=PATH torch_nccl_header=Y

with N and M summed over the ranks; nccl_version is what the bound
libnccl's ncclGetVersion reports (ncclgo: the version of its nccl.h), torch_nccl_header is
torch.cuda.nccl.version(), which is fixed when torch is compiled and does
not show which library is loaded. Exit status 1 on any failure.
"""

import argparse
import datetime
import os
import sys
import time
import traceback

import ncclinfo

DTYPES = ("float32", "bfloat16", "float16")
COUNTS = "1,4099,1048579"


def say(line):
    """Print one line with one write, so that lines of different ranks do not interleave."""
    os.write(1, (line + "\n").encode())


class Checker:
    """Counts checks and prints every failure."""

    def __init__(self, rank, verbose):
        self.rank = rank
        self.verbose = verbose
        self.passed = 0
        self.failed = 0

    def fail(self, op, dtype, count, msg):
        self.failed += 1
        say(f"MISMATCH op={op} dtype={dtype} count={count} rank={self.rank}: {msg}")

    def ok(self, op, dtype, count):
        self.passed += 1
        if self.verbose:
            say(f"ok op={op} dtype={dtype} count={count} rank={self.rank}")

    def compare(self, op, dtype, count, got, want, rtol=0.0):
        """got (any device, any dtype) must equal want (host float64) within rtol."""
        got = got.detach().reshape(-1).cpu().double()
        want = want.reshape(-1).double()
        if got.numel() != want.numel():
            self.fail(op, dtype, count, f"got {got.numel()} elements, want {want.numel()}")
            return
        limit = rtol * want.abs().clamp(min=1.0)
        bad = ~((got - want).abs() <= limit)  # NaN counts as bad
        n = int(bad.sum())
        if n:
            i = int(bad.nonzero()[0])
            self.fail(op, dtype, count,
                      f"{n} of {want.numel()} elements differ; first at [{i}]: "
                      f"got {got[i].item()!r} want {want[i].item()!r}")
        else:
            self.ok(op, dtype, count)

    def run(self, op, dtype, count, fn):
        """Run fn (which compares); an exception is a failure, not the end of the run."""
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - every failure is reported, then we go on
            self.fail(op, dtype, count, f"raised {type(err).__name__}: {err}")
            if self.verbose:
                traceback.print_exc()


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch NCCL collectives against exact expected values")
    p.add_argument("--counts", default=COUNTS, help="comma-separated element counts (default %(default)s)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes (default %(default)s)")
    p.add_argument("--device-id", action="store_true",
                   help="pass device_id to init_process_group (eager init; new_group then uses ncclCommSplit)")
    p.add_argument("--verbose", action="store_true", help="print every passing check and tracebacks")
    p.add_argument("--backend", default="nccl",
                   help="process group backend (default nccl; gloo runs on the CPU, to test this script)")
    p.add_argument("--skip", default="",
                   help="comma-separated op prefixes not to run (e.g. all_reduce/avg for gloo)")
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
    # More processes than GPUs (ncclgo under MPS): they share them round-robin.
    if args.backend == "nccl" and torch.cuda.device_count() > 0:
        local %= torch.cuda.device_count()
    gpu = args.backend == "nccl"
    if gpu:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    kwargs = {"device_id": dev} if args.device_id else {}
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=120), **kwargs)
    barrier_kw = {"device_ids": [local]} if gpu else {}
    store = dist.distributed_c10d._get_default_store()

    def sync():
        if gpu:
            torch.cuda.synchronize()

    counts = [int(x) for x in args.counts.split(",") if x]
    dtypes = [getattr(torch, name) for name in args.dtypes.split(",") if name]
    c = Checker(rank, args.verbose)
    skip = tuple(x for x in args.skip.split(",") if x)
    run = c.run

    def skipping_run(op, dtype, count, fn):
        if not (skip and op.startswith(skip)):
            run(op, dtype, count, fn)

    c.run = skipping_run
    pow2 = world & (world - 1) == 0

    def idx(n):
        return torch.arange(n, dtype=torch.float64)

    # Rank-dependent inputs, exact in bf16 (integers below 256, halves) for up to 8 ranks.
    def p_sum(r, n):
        return (idx(n) % 7 + 1) * (r + 1)

    def p_max(r, n):
        return (idx(n) * 5 + r * 3) % 11 - 5

    def on_dev(x, dt):
        return x.to(dt).to(dev)

    def name(dt):
        return str(dt).replace("torch.", "")

    # The library check: the NCCL calls must go where run.sh says.
    warm = torch.ones(1, device=dev)
    dist.all_reduce(warm)
    sync()
    info = ncclinfo.bound_nccl()
    problems = ncclinfo.check(info, args) if gpu else []
    for e in problems:
        c.fail("library", "-", 0, e)
    if not problems:
        c.ok("library", "-", 0)
    if rank == 0:
        say(f"TORCH-LIB rank=0 {ncclinfo.describe(info)} via={info['via']} "
            f"torch={torch.__version__} torch_nccl_header={ncclinfo.torch_header_version()}")

    # all_reduce: sum, avg, max.
    for opname, op in (("sum", ReduceOp.SUM), ("avg", ReduceOp.AVG), ("max", ReduceOp.MAX)):
        for dt in dtypes:
            for n in counts:
                def case(opname=opname, op=op, dt=dt, n=n):
                    pat = p_max if opname == "max" else p_sum
                    ins = [pat(r, n) for r in range(world)]
                    if opname == "max":
                        want = torch.stack(ins).amax(0)
                    else:
                        want = sum(ins)
                        if opname == "avg":
                            want = want / world
                    t = on_dev(ins[rank], dt)
                    dist.all_reduce(t, op=op)
                    eps = torch.finfo(dt).eps
                    rtol = 0.0 if (opname != "avg" or pow2) else 4 * eps
                    c.compare(f"all_reduce/{opname}", name(dt), n, t, want, rtol)
                c.run(f"all_reduce/{opname}", name(dt), n, case)

    # broadcast from every root.
    for dt in dtypes:
        for n in counts:
            for root in range(world):
                def case(dt=dt, n=n, root=root):
                    t = on_dev(p_sum(rank, n), dt)
                    dist.broadcast(t, src=root)
                    c.compare(f"broadcast/root{root}", name(dt), n, t, p_sum(root, n))
                c.run(f"broadcast/root{root}", name(dt), n, case)

    # all_gather_into_tensor.
    for dt in dtypes:
        for n in counts:
            def case(dt=dt, n=n):
                out = torch.full((world * n,), -1.0, dtype=dt, device=dev)
                dist.all_gather_into_tensor(out, on_dev(p_max(rank, n), dt))
                c.compare("all_gather_into_tensor", name(dt), n, out,
                          torch.cat([p_max(r, n) for r in range(world)]))
            c.run("all_gather_into_tensor", name(dt), n, case)

    # reduce_scatter_tensor: sum in every dtype, max in the first.
    for opname, op, dts in (("sum", ReduceOp.SUM, dtypes), ("max", ReduceOp.MAX, dtypes[:1])):
        for dt in dts:
            for n in counts:
                def case(opname=opname, op=op, dt=dt, n=n):
                    pat = p_max if opname == "max" else p_sum
                    ins = [pat(r, world * n) for r in range(world)]
                    full = torch.stack(ins).amax(0) if opname == "max" else sum(ins)
                    out = torch.full((n,), -1.0, dtype=dt, device=dev)
                    dist.reduce_scatter_tensor(out, on_dev(ins[rank], dt), op=op)
                    c.compare(f"reduce_scatter_tensor/{opname}", name(dt), n, out,
                              full[rank * n:(rank + 1) * n])
                c.run(f"reduce_scatter_tensor/{opname}", name(dt), n, case)

    # all_to_all_single: block from rank s to rank d holds 4*(s*W+d) + i%4.
    def block(s, d, size):
        return 4 * (s * world + d) + idx(size) % 4

    def uneven(s, d, n):
        return n + (s + 2 * d) % 3

    for dt in dtypes:
        for n in counts:
            def case(dt=dt, n=n):
                inp = on_dev(torch.cat([block(rank, d, n) for d in range(world)]), dt)
                out = torch.full((world * n,), -1.0, dtype=dt, device=dev)
                dist.all_to_all_single(out, inp)
                c.compare("all_to_all_single", name(dt), n, out,
                          torch.cat([block(s, rank, n) for s in range(world)]))
            c.run("all_to_all_single", name(dt), n, case)

            def case_v(dt=dt, n=n):
                ins = [uneven(rank, d, n) for d in range(world)]
                outs = [uneven(s, rank, n) for s in range(world)]
                inp = on_dev(torch.cat([block(rank, d, ins[d]) for d in range(world)]), dt)
                out = torch.full((sum(outs),), -1.0, dtype=dt, device=dev)
                dist.all_to_all_single(out, inp, output_split_sizes=outs, input_split_sizes=ins)
                c.compare("all_to_all_single/uneven", name(dt), n, out,
                          torch.cat([block(s, rank, outs[s]) for s in range(world)]))
            c.run("all_to_all_single/uneven", name(dt), n, case_v)

    # send/recv around the ring: blocking (even ranks send first), then batched.
    def p_ring(r, n):
        return idx(n) % 13 + 1 + 16 * r

    if world > 1:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        for dt in dtypes:
            for n in counts:
                def case(dt=dt, n=n):
                    t = on_dev(p_ring(rank, n), dt)
                    r = torch.full((n,), -1.0, dtype=dt, device=dev)
                    if rank % 2 == 0:
                        dist.send(t, dst=nxt)
                        dist.recv(r, src=prv)
                    else:
                        dist.recv(r, src=prv)
                        dist.send(t, dst=nxt)
                    c.compare("send_recv", name(dt), n, r, p_ring(prv, n))
                c.run("send_recv", name(dt), n, case)

                def case_b(dt=dt, n=n):
                    t = on_dev(p_ring(rank, n), dt)
                    r = torch.full((n,), -1.0, dtype=dt, device=dev)
                    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, nxt),
                                                   dist.P2POp(dist.irecv, r, prv)])
                    for q in reqs:
                        q.wait()
                    c.compare("batch_isend_irecv", name(dt), n, r, p_ring(prv, n))
                c.run("batch_isend_irecv", name(dt), n, case_b)

    # barrier: rank 0 arrives a second late and only then marks the store
    # (a counter: add(key, 0) reads it); after the barrier every rank must see the mark.
    for k in range(2):
        def case(k=k):
            key = f"torchcheck/barrier{k}"
            if rank == 0:
                time.sleep(1.0)
                store.add(key, 1)
            t0 = time.monotonic()
            dist.barrier(**barrier_kw)
            waited = time.monotonic() - t0
            if store.add(key, 0) != 1:
                c.fail("barrier", "-", k, f"passed the barrier after {waited:.3f} s before rank 0 arrived")
            else:
                c.ok("barrier", "-", k)
        c.run("barrier", "-", k, case)

    # new_group: every rank, then one group per rank.
    n = counts[-1]
    g_all = dist.new_group(list(range(world)))
    singles = [dist.new_group([r]) for r in range(world)]
    for dt in dtypes:
        def case_all(dt=dt):
            t = on_dev(p_sum(rank, n), dt)
            dist.all_reduce(t, group=g_all)
            c.compare("new_group(all)/all_reduce", name(dt), n, t, sum(p_sum(r, n) for r in range(world)))
            b = on_dev(p_sum(rank, n), dt)
            dist.broadcast(b, src=world - 1, group=g_all)
            c.compare("new_group(all)/broadcast", name(dt), n, b, p_sum(world - 1, n))
        c.run("new_group(all)", name(dt), n, case_all)

        def case_single(dt=dt):
            t = on_dev(p_max(rank, n), dt)
            dist.all_reduce(t, group=singles[rank])
            c.compare("new_group(self)/all_reduce", name(dt), n, t, p_max(rank, n))
        c.run("new_group(self)", name(dt), n, case_single)

    sync()

    # Totals over the ranks through the store (not through NCCL, which may be what failed).
    store.set(f"torchcheck/result{rank}", f"{c.passed} {c.failed}")
    say(f"TORCH-CHECKS-RANK rank={rank} passed={c.passed} failed={c.failed}")
    total_failed = c.failed
    if rank == 0:
        keys = [f"torchcheck/result{r}" for r in range(world)]
        passed = failed = 0
        try:
            store.wait(keys, datetime.timedelta(seconds=60))
            for k in keys:
                p, f = store.get(k).decode().split()
                passed += int(p)
                failed += int(f)
        except Exception as err:  # noqa: BLE001
            say(f"MISMATCH op=summary dtype=- count=0 rank=0: ranks did not report: {err}")
            failed += 1
        total_failed = failed
        say(f"TORCH-CHECKS passed={passed} failed={failed} ranks={world} backend={dist.get_backend()} "
            f"{ncclinfo.describe(info)} torch_nccl_header={ncclinfo.torch_header_version()}")
    dist.barrier(**barrier_kw)
    dist.destroy_process_group()
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())
