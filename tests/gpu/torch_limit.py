"""PyTorch under a gpuslice slice: the caching allocator sees the slice, not the card.

Run by tests/gpu/run.sh as: gpuslice run --memory 4g -- python3 torch_limit.py 4
Prints PASS/FAIL lines; exit code 1 on any failure.
"""
import sys

import torch

limit_gib = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
failures = 0


def check(name, ok, detail=""):
    global failures
    print(f"{'PASS' if ok else 'FAIL'}: {name} {detail}")
    failures += 0 if ok else 1


free, total = torch.cuda.mem_get_info()
check("mem_get_info total is the slice", abs(total / 2**30 - limit_gib) < 0.01, f"(total {total / 2**30:.2f} GiB)")
a = torch.empty(int(limit_gib * 0.5 * 2**30), dtype=torch.uint8, device="cuda")
a.fill_(7)
# Every byte reads back as written. Not a.sum(): that promotes uint8 to int64 and asks
# for 8x the tensor (16 GiB for these 2 GiB), far beyond the slice. min and max reduce
# in uint8 with no temporary of the tensor's size.
lo, hi = a.min().item(), a.max().item()
check("allocation within the slice", lo == 7 and hi == 7, f"({a.numel() / 2**30:.2f} GiB, min {lo} max {hi})")
try:
    b = torch.empty(int(limit_gib * 0.75 * 2**30), dtype=torch.uint8, device="cuda")
    check("allocation beyond the slice is refused", False, "(it was granted)")
except torch.cuda.OutOfMemoryError as e:
    check("allocation beyond the slice is refused", True, f"({str(e).splitlines()[0][:80]})")
x = torch.randn(4096, 4096, device="cuda")
y = x @ x
torch.cuda.synchronize()
check("matmul runs under the enforcer", torch.isfinite(y).all().item())
sys.exit(1 if failures else 0)
