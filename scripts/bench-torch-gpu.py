"""PyTorch's figures on this machine's first GPU, for `make gpu-check` to print beside
tinyperf's: ResNet-50 training img/s (AMP fp16 and TF32, both channels_last) and cuBLAS
matmul TFLOP/s (fp16 and TF32). One JSON object per line on stdout.

Usage: python3 scripts/bench-torch-gpu.py [--batch 256] [--steps 10] [--warmup 3] [--gemm 8192]
"""
import argparse
import json
import statistics
import time

import torch
import torchvision


def train_img_per_s(batch, steps, warmup, amp):
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        loss.item()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    return {"engine": "pytorch", "model": "resnet50", "batch": batch,
            "precision": "amp-fp16" if amp else "tf32", "img_per_s": batch / median,
            "step_ms_median": median * 1e3,
            "peak_mem_bytes": torch.cuda.max_memory_allocated()}


def matmul_tflops(n, dtype, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.rand(n, n, device="cuda", dtype=dtype) * 2 - 1
    b = torch.rand(n, n, device="cuda", dtype=dtype) * 2 - 1
    for _ in range(2):
        a @ b
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = statistics.median(times)
    return {"engine": "pytorch", "matmul": n, "dtype": str(dtype).split(".")[-1],
            "tf32": tf32, "tflops": 2 * n**3 / (ms * 1e-3) / 1e12}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--gemm", type=int, default=8192)
    a = p.parse_args()
    print(json.dumps({"engine": "pytorch", "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(0)}), flush=True)
    # --gemm 0 skips the matmul figures (training throughput only).
    for dtype, tf32 in ((torch.float16, False), (torch.float32, True), (torch.float32, False)):
        if a.gemm > 0:
            print(json.dumps(matmul_tflops(a.gemm, dtype, tf32)), flush=True)
    for amp in (True, False):
        print(json.dumps(train_img_per_s(a.batch, a.steps, a.warmup, amp)), flush=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main()
