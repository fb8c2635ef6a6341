"""Every registered objective vs a plain token-mean GRPO loss: forward + backward on the same tensors.

    python bench/objective_bench.py [--rows 4096] [--tokens 1024] [--repeats 5] [--device cpu]
    python bench/objective_bench.py --smoke      # a check that it runs: 64 rows x 32 tokens, once

Prints a markdown table (K, ms per registered objective, plain ms, srpo / plain) and the
machine. Goal: srpo / plain <= 1.1. The registered objectives also compute their metrics
(one device sync); the plain loss is the bare formula, as most trainers write it.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

from srpo_dsl.rl import OBJECTIVES


def grpo_token_mean(
    logprobs: Tensor, old_logprobs: Tensor, mask: Tensor, advantages: Tensor, clip_eps: float = 0.2
) -> Tensor:
    """The usual GRPO/DAPO loss: per-token ratio, per-token clip, mean over generated tokens."""
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    per_token = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    return -(per_token * mask).sum() / mask.sum()


def time_ms(steps: list[Callable[[], None]], device: torch.device, repeats: int) -> list[float]:
    """Median wall time of each step in ms; steps alternate so they share the machine's noise."""
    times: list[list[float]] = [[] for _ in steps]
    for r in range(repeats + 1):  # the first round warms up
        for step, acc in zip(steps, times):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if r:
                acc.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--smoke", action="store_true", help="a check that it runs: 64 rows x 32 tokens, once"
    )
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.tokens, args.repeats = 64, 32, 1
    device = torch.device(args.device)

    g = torch.Generator().manual_seed(args.seed)
    old = (-torch.rand(args.rows, args.tokens, generator=g) * 4).to(device)
    logprobs = (old + 0.05 * torch.randn(old.shape, generator=g).to(device)).requires_grad_()
    lengths = torch.randint(args.tokens // 4, args.tokens + 1, (args.rows,), generator=g).to(device)
    mask = torch.arange(args.tokens, device=device)[None, :] < lengths[:, None]
    mask_f = mask.float()

    def backward(loss: Tensor) -> None:
        logprobs.grad = None
        loss.backward()

    print(
        f"machine: {platform.platform()} | {platform.processor() or platform.machine()} | "
        f"python {platform.python_version()} | torch {torch.__version__} | device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f" | threads {torch.get_num_threads()}"
    )
    print(
        f"rows {args.rows} x tokens {args.tokens}, {int(mask.sum())} generated tokens, "
        f"median of {args.repeats}, forward + backward\n"
    )
    header = " | ".join(f"{name} ms" for name in OBJECTIVES)
    print(f"| K | {header} | plain ms | srpo / plain |")
    print("|---:|" + "---:|" * (len(OBJECTIVES) + 2))
    for k in (1, 2, 4, 8):
        event_ids = torch.arange(args.rows, device=device) // k
        episode_ids = event_ids // 2  # episodes of two events (traj's sets)
        advantages = torch.randn(args.rows // (2 * k) + 1, generator=g).to(device)[episode_ids]
        steps = [
            lambda o=objective, e=event_ids, a=advantages, p=episode_ids: backward(
                o(logprobs, old, mask, e, a, episode_ids=p)[0]
            )
            for objective in OBJECTIVES.values()
        ]
        steps.append(lambda a=advantages: backward(grpo_token_mean(logprobs, old, mask_f, a)))
        times = time_ms(steps, device, args.repeats)
        cells = " | ".join(f"{t:.1f}" for t in times)
        print(f"| {k} | {cells} | {times[0] / times[-1]:.2f} |")


if __name__ == "__main__":
    main()
