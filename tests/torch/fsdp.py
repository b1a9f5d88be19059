#!/usr/bin/env python3
"""DDP against one process on the whole batch, and FSDP2 against DDP (issue 23).

Run under torchrun like ddp.py:

    torchrun --standalone --nproc-per-node 2 tests/torch/fsdp.py [--steps 200] [--rtol 1e-6] \
        [--expect-nccl-version 2.28.7] [--expect-nccl-lib bundle/lib/libnccl.so.2]

A small transformer (2 encoder layers, d_model 32, 4 heads, no dropout,
a linear head) learns a fixed random target on synthetic data drawn from
--seed; every run starts from the same initialisation. Three trainings of
--steps steps, SGD, float32, TF32 off, deterministic algorithms:

  single  rank 0 alone, the whole batch, no communication (the reference);
  ddp     DistributedDataParallel, each rank its slice of every batch;
  fsdp2   fully_shard on each layer and the root, the same slices.

The loss of a step is the mean over the whole batch (each rank's slice
mean, averaged over the ranks by all_reduce). Rank 0 prints

    FSDP-COMPARE a=ddp b=single steps=200 max_rel_diff=... at_step=... rtol=1e-06 result=OK
    FSDP-COMPARE a=fsdp2 b=ddp steps=200 max_rel_diff=... at_step=... rtol=1e-06 result=OK

and writes the three loss lists to --out (JSON). Exit status 1 when a
comparison exceeds --rtol, a loss is not finite, or the library is not
the expected one.
"""

import argparse
import datetime
import json
import math
import os
import sys

import ncclinfo

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

SEQ, DMODEL, HEADS, LAYERS = 8, 32, 4, 2


def say(line):
    os.write(1, (line + "\n").encode())


def parse_args():
    p = argparse.ArgumentParser(description="DDP vs one process, FSDP2 vs DDP")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=24, help="global batch (a multiple of 2, 3 and 4 by default)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--rtol", type=float, default=1e-6)
    p.add_argument("--out", default="")
    p.add_argument("--backend", default="nccl")
    ncclinfo.add_arguments(p)
    return p.parse_args()


def rel_diff(a, b):
    worst, at, problems = 0.0, 0, []
    if len(a) != len(b):
        problems.append(f"step counts differ: {len(a)} vs {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        if not (math.isfinite(x) and math.isfinite(y)):
            problems.append(f"step {i}: not finite ({x!r}, {y!r})")
            continue
        d = abs(x - y) / max(abs(y), 1e-30)
        if d > worst:
            worst, at = d, i
    return worst, at, problems


def main():
    args = parse_args()
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpu = args.backend == "nccl"
    if gpu:
        local = int(os.environ["LOCAL_RANK"]) % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=120))
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} is not a multiple of the world size {world}")
    per = args.batch // world

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(DMODEL, HEADS, dim_feedforward=64, dropout=0.0, batch_first=True)
                for _ in range(LAYERS))
            self.head = nn.Linear(DMODEL, 1)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.head(x).squeeze(-1)

    def fresh():
        torch.manual_seed(args.seed)
        return Net().to(dev)

    g = torch.Generator().manual_seed(args.seed + 1)
    data = [(torch.randn(args.batch, SEQ, DMODEL, generator=g), torch.randn(args.batch, SEQ, generator=g))
            for _ in range(args.steps)]

    def train(model, slice_, reduce_loss):
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        losses = []
        for x, y in data:
            x, y = x[slice_].to(dev), y[slice_].to(dev)
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(reduce_loss(loss.detach()))
        return losses

    def global_mean(loss):
        t = loss.clone()
        dist.all_reduce(t, op=dist.ReduceOp.AVG if gpu else dist.ReduceOp.SUM)
        if not gpu:
            t /= world
        return t.item()

    mine = slice(rank * per, (rank + 1) * per)
    single = train(fresh(), slice(None), lambda l: l.item()) if rank == 0 else []

    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = train(DDP(fresh(), device_ids=[dev.index] if gpu else None), mine, global_mean)

    from torch.distributed.fsdp import fully_shard
    m = fresh()
    for layer in m.layers:
        fully_shard(layer)
    fully_shard(m)
    fsdp2 = train(m, mine, global_mean)

    info = ncclinfo.bound_nccl()
    problems = ncclinfo.check(info, args) if gpu else []
    failed = 0
    for e in problems:
        say(f"FSDP-ERROR rank={rank}: {e}")
        failed += 1
    if rank == 0:
        for a, b, la, lb in (("ddp", "single", ddp, single), ("fsdp2", "ddp", fsdp2, ddp)):
            worst, at, probs = rel_diff(la, lb)
            ok = not probs and worst <= args.rtol
            failed += 0 if ok else 1
            say(f"FSDP-COMPARE a={a} b={b} steps={len(la)} max_rel_diff={worst:.3g} at_step={at} rtol={args.rtol:g} "
                f"first={la[0]:.6g} last={la[-1]:.6g} result={'OK' if ok else 'FAIL'}")
            for p_ in probs[:5]:
                say(f"FSDP-ERROR {a} vs {b}: {p_}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "steps": args.steps, "single": single, "ddp": ddp, "fsdp2": fsdp2,
                           "lib": ncclinfo.describe(info)}, f)
    t = torch.tensor([failed], device=dev)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return 1 if t.item() else 0


if __name__ == "__main__":
    sys.exit(main())
