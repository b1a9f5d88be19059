#!/usr/bin/env python3
"""A deterministic DDP training whose losses compare across NCCL libraries (issue 12).

Run under torchrun, one GPU per process (device = LOCAL_RANK):

    torchrun --standalone --nproc-per-node 2 tests/torch/ddp.py --out loss.json \
        [--expect-nccl-version 2.28.7] [--expect-nccl-lib bundle/lib/libnccl.so.2]

A small MLP (32-64-64-1, tanh) learns a fixed random teacher network on
synthetic data, everything drawn from --seed: each rank starts from its own
initialisation (seed + rank), so DDP's initial broadcast must make every
rank equal to rank 0's; each rank trains on its own slice of every batch;
the gradients go through DDP's bucketed all_reduce (small buckets, so
several per step); plain SGD with momentum, TF32 off, deterministic
algorithms on. Rank 0 writes the per-step loss of its own batch ("loss")
and the rank-averaged loss ("global_loss", one more all_reduce per step) to
--out as JSON, with a digest of the final parameters, and prints

    DDP-TRAIN steps=200 ranks=2 first_loss=... last_loss=... param_digest=... nccl_version=... libnccl=...

It fails (exit 1) when the library is not the expected one, the ranks'
parameters differ after DDP's broadcast or at the end, or a loss is not
finite. Compare two runs with compare_loss.py.
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import sys

import ncclinfo

# cuBLAS is deterministic only with a fixed workspace; it must be set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

IN, HIDDEN = 32, 64


def parse_args():
    p = argparse.ArgumentParser(description="deterministic DDP training; writes rank 0's per-step loss")
    p.add_argument("--out", required=True, help="JSON file for rank 0's losses")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--bucket-cap-mb", type=float, default=0.01,
                   help="DDP bucket size (default %(default)s MB: several buckets for this model)")
    p.add_argument("--backend", default="nccl", help="default nccl; gloo runs on the CPU, to test this script")
    ncclinfo.add_arguments(p)
    return p.parse_args()


def main():
    args = parse_args()
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

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
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    else:
        dev = torch.device("cpu")
    torch.use_deterministic_algorithms(True)
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=120))
    errors = []

    def model_from(seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                             nn.Linear(HIDDEN, 1))

    def flat(m):
        return torch.cat([p.detach().reshape(-1) for p in m.parameters()])

    def gather_flat(t):
        outs = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(outs, t)
        return outs

    # Data: a random teacher on random inputs, all from the seed (CPU generator: same on every machine).
    g = torch.Generator().manual_seed(args.seed)
    xs = torch.randn(args.steps, world, args.batch, IN, generator=g)
    teacher = model_from(args.seed + 10_000)
    with torch.no_grad():
        ys = teacher(xs) + 0.05 * torch.randn(args.steps, world, args.batch, 1, generator=g)

    model = model_from(args.seed + rank).to(dev)
    want0 = flat(model_from(args.seed)).to(dev)
    ddp = DDP(model, device_ids=[local] if gpu else None, bucket_cap_mb=args.bucket_cap_mb)
    if not torch.equal(flat(model), want0):
        errors.append(f"rank {rank}: parameters after DDP's broadcast differ from rank 0's initialisation")

    info = ncclinfo.bound_nccl()
    if gpu:
        errors += ncclinfo.check(info, args)

    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    losses, global_losses = [], []
    for step in range(args.steps):
        x = xs[step, rank].to(dev)
        y = ys[step, rank].to(dev)
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        losses.append(loss.item())
        global_losses.append(avg.item() / world)
        if not math.isfinite(losses[-1]):
            errors.append(f"rank {rank}: loss at step {step} is {losses[-1]}")
            break

    final = flat(model)
    others = gather_flat(final)
    for r, o in enumerate(others):
        if not torch.equal(o, final):
            errors.append(f"rank {rank}: final parameters differ from rank {r}'s")
    vals = final.double().cpu().tolist()
    digest = hashlib.sha256(repr(vals).encode()).hexdigest()[:16]

    for e in errors:
        print(f"DDP-ERROR {e}", flush=True)
    # Every rank's verdict reaches rank 0 before it writes the file.
    bad = torch.tensor([len(errors)], dtype=torch.int64, device=dev)
    dist.all_reduce(bad)
    if rank == 0:
        result = {
            "steps": len(losses), "ranks": world, "seed": args.seed, "batch": args.batch, "lr": args.lr,
            "backend": args.backend, "torch": torch.__version__,
            "nccl_version": ncclinfo.format_version(info["version"]) if info["version"] else None,
            "libnccl": info["path"], "torch_nccl_header": ncclinfo.torch_header_version(),
            "loss": losses, "global_loss": global_losses,
            "param_sum": math.fsum(vals), "param_digest": digest, "errors_all_ranks": int(bad.item()),
        }
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"DDP-TRAIN steps={len(losses)} ranks={world} first_loss={losses[0]:.9g} "
              f"last_loss={losses[-1]:.9g} param_digest={digest} errors={int(bad.item())} "
              f"{ncclinfo.describe(info)} out={args.out}", flush=True)
    dist.destroy_process_group()
    return 1 if int(bad.item()) else 0


if __name__ == "__main__":
    sys.exit(main())
