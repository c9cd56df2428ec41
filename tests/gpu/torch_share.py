"""PyTorch work for tests/gpu/verify.sh's pytorch:share check.

Runs bf16 matrix products (cuBLAS kernels, launched through the CUDA runtime) back to back on the
GPU for --seconds, waiting for each one, and prints one JSON line:
  {"work_per_window": [products completed in second 1, 2, ...], "n": N, "ms_per_product": x}
Under libgpuslice-cuda.so with GPUSLICE_COMPUTE_SHARE_MILLI set, the products' rate against the
same program's rate alone is the share PyTorch's kernels really got: it shows whether launches
made by the runtime and by cuBLAS reach the interposer's throttle.

--n picks the matrix size (default 8192: about 1 ms per product on an H100/H200).
"""
import argparse
import json
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--n", type=int, default=8192)
    args = parser.parse_args()

    a = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(args.n, args.n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):  # cuBLAS start-up and heuristics outside the windows
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()

    windows = [0] * int(args.seconds)
    start = time.monotonic()
    done = 0
    while True:
        torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        elapsed = time.monotonic() - start
        if elapsed >= args.seconds:
            break
        windows[int(elapsed)] += 1
        done += 1
    print(json.dumps({"work_per_window": windows, "n": args.n,
                      "ms_per_product": 1000.0 * args.seconds / max(done, 1)}), flush=True)


if __name__ == "__main__":
    main()
