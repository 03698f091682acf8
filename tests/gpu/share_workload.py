"""A real GPU workload for the compute-share checks: runs it for a while, reports its rate.

Run by tests/gpu/run.sh, alone and under `gpuslice run --cores N`, as:
    python3 share_workload.py KIND SECONDS [--barrier DIR PARTIES]
KIND:
    matmul4096, matmul16384  bf16 NxN matmuls, 8 per torch.cuda.synchronize()
                             (an op is one matmul; ~0.2 ms / ~12 ms each on an H100)
    infer                    a TransformerEncoderLayer forward, fp16, batch 8x512x1024,
                             a sync after every step (an op is one step)
    small                    element-wise adds on a 4096-element tensor, 256 per sync
                             (an op is one kernel)
Warms up for about a second (cuBLAS heuristics, caching allocator), then times whole
batches, each ended by a sync, for at least SECONDS, and prints one line:
    workload KIND ops=N seconds=S rate=R
where R = N / S, ops per second. Achieved share = rate under a slice / rate alone.
With --watch it also samples the card with nvidia-smi every 100 ms while it times, and
prints the means over the window:
    card util=U sm_mhz=C power_w=P samples=N
(the card's busy time, its SM clock and its power draw, "?" for a figure the card does not
report: a tenant held to part of the card may run its bursts at a higher clock than it can
sustain alone, so its rate can exceed its share of time), or "card unavailable" when
nvidia-smi is missing or gave no sample.

--barrier DIR PARTIES: after the warm-up, marks itself ready in DIR and starts timing only
when PARTIES processes are ready there (for competing runs: everyone is timed over the
same window, however long each took to import torch). Waits at most 120 s.

GS_WORKLOAD_DEVICE=cpu runs the same code on the CPU (to try the script without a GPU;
the rates then mean nothing).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import torch

KINDS = ("matmul4096", "matmul16384", "infer", "small")


def make_step(kind, dev):
    """Returns step(): queues one batch of work, returns how many ops it queued."""
    if kind.startswith("matmul"):
        n = int(kind[len("matmul"):])
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)

        def step():
            for _ in range(8):
                torch.matmul(a, b, out=c)
            return 8

        return step
    if kind == "infer":
        dtype = torch.float16 if dev == "cuda" else torch.float32  # fp16 layers are GPU-only in old torch
        layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
        layer = layer.to(device=dev, dtype=dtype).eval()
        x = torch.randn(8, 512, 1024, device=dev, dtype=dtype)

        def step():
            with torch.inference_mode():
                layer(x)
            return 1

        return step
    if kind == "small":
        x = torch.zeros(4096, device=dev)
        y = torch.ones(4096, device=dev)

        def step():
            for _ in range(256):
                x.add_(y)
            return 256

        return step
    raise ValueError(kind)


def timed(step, sync, seconds):
    """Runs whole batches (each ended by a sync) until `seconds` have passed."""
    ops = 0
    sync()
    start = time.perf_counter()
    while True:
        ops += step()
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return ops, elapsed


class CardWatch:
    """nvidia-smi sampling the workload's card every 100 ms, without the enforcer's preload.
    Its rows are read as they come (line-buffered where stdbuf exists), so none is lost when
    it is stopped."""

    FIELDS = "utilization.gpu,clocks.sm,power.draw"

    def __init__(self, card):
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        cmd = ["nvidia-smi", "--query-gpu=" + self.FIELDS, "--format=csv,noheader,nounits", "-lms", "100"]
        if card:
            cmd += ["-i", card]
        if shutil.which("stdbuf"):
            cmd = ["stdbuf", "-oL"] + cmd
        self.rows = []
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        except OSError:
            self.proc = None
            return
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        try:
            for line in self.proc.stdout:
                fields = [x.strip() for x in line.split(",")]
                if not line.endswith("\n") or len(fields) != 3:
                    continue  # cut by the stop, or not a sample (an error message)
                # A field may read "[N/A]" (power on some boards): the others still count.
                row = [float(x) if x.replace(".", "", 1).isdigit() else None for x in fields]
                if row[0] is not None:
                    self.rows.append(row)
        except (OSError, ValueError):
            pass  # the watch ends with what it read

    def stop(self):
        """Ends the sampling; returns the line to print."""
        if self.proc is None:
            return "card unavailable"
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        means = []
        for i in range(3):
            got = [r[i] for r in self.rows if len(r) > i and r[i] is not None]
            means.append(sum(got) / len(got) if got else None)
        if means[0] is None:
            return "card unavailable"
        fmt = lambda v, spec: "?" if v is None else format(v, spec)
        return (f"card util={means[0]:.1f} sm_mhz={fmt(means[1], '.0f')} power_w={fmt(means[2], '.0f')} "
                f"samples={len(self.rows)}")


def card_of(dev):
    """The workload's card for nvidia-smi -i: "GPU-<its UUID>" as PyTorch knows it, else
    None (then nvidia-smi reports every card: right on a machine of one)."""
    if not dev.startswith("cuda"):
        return None
    try:
        index = torch.device(dev).index
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index).uuid)
    except (AttributeError, RuntimeError, TypeError):
        return None
    if uuid.startswith("GPU-"):
        uuid = uuid[4:]
    return "GPU-" + uuid if re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", uuid) else None


def barrier(directory, parties):
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, f"ready-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 120
    while sum(1 for f in os.listdir(directory) if f.startswith("ready-")) < parties:
        if time.monotonic() > deadline:
            print(f"share_workload: barrier {directory}: not all {parties} ready after 120 s; starting anyway",
                  file=sys.stderr)
            return
        time.sleep(0.002)


def main():
    p = argparse.ArgumentParser(description="A GPU workload for the compute-share checks.")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("seconds", type=float)
    p.add_argument("--barrier", nargs=2, metavar=("DIR", "PARTIES"))
    p.add_argument("--watch", action="store_true", help="sample the card with nvidia-smi while timing")
    args = p.parse_args()

    dev = os.environ.get("GS_WORKLOAD_DEVICE", "cuda")
    if dev == "cuda" and not torch.cuda.is_available():
        print("share_workload: CUDA is not available to PyTorch", file=sys.stderr)
        return 2
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    step = make_step(args.kind, dev)
    timed(step, sync, 1.0)  # warm-up
    if args.barrier:
        barrier(args.barrier[0], int(args.barrier[1]))
    watch = CardWatch(card_of(dev)) if args.watch else None
    ops, elapsed = timed(step, sync, args.seconds)
    print(f"workload {args.kind} ops={ops} seconds={elapsed:.3f} rate={ops / elapsed:.3f}", flush=True)
    if watch:
        print(watch.stop(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
