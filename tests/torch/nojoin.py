#!/usr/bin/env python3
"""A rank that never joins: the others must fail within torch's timeout, with ncclgo's text (issue 23).

Run under torchrun (2 or more processes):

    torchrun --standalone --nproc-per-node 2 tests/torch/nojoin.py [--timeout 20] [--expect-text ncclgo]

Every rank initializes and all-reduces once; then the last rank stops
calling while the others all_reduce again (TORCH_NCCL_BLOCKING_WAIT=1,
TORCH_NCCL_ASYNC_ERROR_HANDLING=2: abort, no process kill) with a
process-group timeout of --timeout seconds. --mode exit (default): the
absent rank's process exits without destroying its communicator, which
ncclgo's liveness watch reports (ncclCommGetAsyncError, polled by torch's
watchdog; "exited without destroying the communicator"). --mode sleep: it
stays alive and idle, so only torch's timeout can end the wait, by
ncclCommAbort from the watchdog thread while the kernel spins. Either
way the waiting rank must get an error within --timeout + --grace
seconds. Each waiting rank prints

    NOJOIN rank=R failed_after=S.s within=T.s error=... result=OK|FAIL

result=OK when the wait ended in an exception within the bound, and the
error text (or ncclGetLastError's, which torch puts in it) contains
--expect-text when given. Exit status 0 when every waiting rank is OK.
"""

import argparse
import datetime
import os
import sys
import time

# CleanUpOnly: the watchdog aborts the communicator but does not kill the
# process; blocking wait: Work.wait() blocks the CPU and raises the error.
os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")


def say(line):
    os.write(1, (line + "\n").encode())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--timeout", type=float, default=20.0)
    p.add_argument("--grace", type=float, default=40.0, help="time past --timeout allowed for the error")
    p.add_argument("--expect-text", default="")
    p.add_argument("--mode", choices=("exit", "sleep"), default="exit")
    p.add_argument("--backend", default="nccl")
    args = p.parse_args()
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"]) % max(torch.cuda.device_count(), 1)
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout), device_id=dev)
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(1 << 16, device=dev)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    absent = world - 1
    if rank == absent:
        say(f"NOJOIN rank={rank} absent ({args.mode}): not calling all_reduce")
        if args.mode == "exit":
            os._exit(0)
        deadline = time.monotonic() + args.timeout + args.grace + 30
        while time.monotonic() < deadline:
            try:
                if store.add("nojoin/done", 0) >= world - 1:
                    break
            except Exception:  # noqa: BLE001 - the store's host may be gone
                break
            time.sleep(0.5)
        os._exit(0)
    start = time.monotonic()
    err = ""
    try:
        dist.all_reduce(t, async_op=True).wait()
        torch.cuda.synchronize()
        err = "(no error: the all_reduce completed without the absent rank)"
        ok = False
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
        ok = True
    took = time.monotonic() - start
    within = args.timeout + args.grace
    ok = ok and took <= within and (not args.expect_text or args.expect_text in err)
    one_line = " ".join(err.split())[:600]
    say(f"NOJOIN rank={rank} failed_after={took:.1f}s within={within:.0f}s error={one_line} result={'OK' if ok else 'FAIL'}")
    try:
        store.add("nojoin/done", 1)
    except Exception:  # noqa: BLE001
        pass
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
