"""A small PyTorch DDP training job (gloo on CPU) that runs unchanged under torchrun's environment.

Each process reads what the PyTorch operator (and the hub's `framework: pytorch`) sets: MASTER_ADDR,
MASTER_PORT, WORLD_SIZE and RANK. It waits until MASTER_ADDR resolves (cluster DNS publishes a pod's
name once the pod has an address, as the Kubeflow operator's init container waits for it), joins the
process group, then trains a linear model for TRAIN_STEPS steps (default 20): every step's gradients
are averaged by DDP's all-reduce, and rank 0 writes the model, the optimizer and the step to
CHECKPOINT_DIR/latest.pt (default /checkpoints), atomically (a temporary file, then a rename). At start
every rank loads the latest checkpoint when there is one, so a restarted gang resumes where it was.

Progress lines (flushed at once, so `kubectl logs -f` and `federator logs` show them as they come):
  [rank R] rendezvous with MASTER_ADDR:MASTER_PORT as rank R of W (RANK_ADDR)
  [rank R] resumed from checkpoint PATH at step N      (or: no checkpoint in DIR: starting at step 0)
  [rank R] step N/STEPS loss L all-reduced loss M
  [rank R] checkpoint step N saved to PATH             (rank 0)
  [rank R] training done at step STEPS

STEP_SECONDS (default 0) pauses after each step: a test that interrupts training uses it to find the
job mid-way. Usage: python3 train.py (no arguments; everything comes from the environment).
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def env_int(name: str, default: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        if default is None:
            sys.exit(f"train.py: {name} is not set (the job's framework or its env must set it)")
        return default
    try:
        return int(raw)
    except ValueError:
        sys.exit(f"train.py: {name}={raw!r} is not an integer")


def resolve(host: str, *, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.gethostbyname(host)
        except socket.gaierror:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main() -> int:
    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    addr, port = os.environ.get("MASTER_ADDR") or "", env_int("MASTER_PORT")
    if not addr:
        sys.exit("train.py: MASTER_ADDR is not set (the job's framework or its env must set it)")
    steps = env_int("TRAIN_STEPS", 20)
    pause = float(os.environ.get("STEP_SECONDS") or 0)
    directory = Path(os.environ.get("CHECKPOINT_DIR") or "/checkpoints")
    latest = directory / "latest.pt"

    def log(message: str) -> None:
        print(f"[rank {rank}] {message}", flush=True)

    master_ip = resolve(addr, timeout=120)
    log(f"rendezvous with {addr}:{port} as rank {rank} of {world} ({master_ip})")
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if latest.exists():
        state = torch.load(latest)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        log(f"resumed from checkpoint {latest} at step {start}")
    else:
        log(f"no checkpoint in {directory}: starting at step 0")
    # every rank starts from rank 0's step (DDP broadcasts rank 0's weights when it wraps the model)
    first = torch.tensor([start])
    dist.broadcast(first, src=0)
    start = int(first.item())
    ddp = DistributedDataParallel(model)

    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of the data
    truth = torch.arange(8, dtype=torch.float32).unsqueeze(1) / 8
    inputs = torch.randn(256, 8, generator=generator)
    targets = inputs @ truth
    for step in range(start + 1, steps + 1):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        log(f"step {step}/{steps} loss {loss.item():.5f} all-reduced loss {mean.item() / world:.5f}")
        if rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
            partial = directory / f".latest.pt.{os.getpid()}"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, partial)
            os.replace(partial, latest)
            log(f"checkpoint step {step} saved to {latest}")
        if pause:
            time.sleep(pause)
    dist.barrier()
    log(f"training done at step {steps}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
