"""The devices a run may use: the names srpo-dsl knows, and whether this machine has one.

One check for every command (`run`, `eval`, `train`, the dry run), below the API and the trainer, so
checking a device imports no trainer; torch is imported only to ask about CUDA.
"""

from __future__ import annotations

from srpo_dsl.errors import UsageError

DEVICES = ("cpu", "cuda")
DEVICE_WORDS = {"cpu": "the CPU", "cuda": "a CUDA GPU"}  # as error lines name them


class DeviceError(UsageError):
    """A device this run cannot use (exit 2); the message is one line for the user."""


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def check_device(device: str | None) -> None:
    """A device srpo-dsl knows, and (`cuda`) one this machine has; None: not chosen (see `resolve_device`)."""
    if device is not None and device not in DEVICES:
        raise DeviceError(f"device {device!r}: expected one of {', '.join(DEVICES)}")
    if device == "cuda" and not cuda_available():
        raise DeviceError("--device cuda: no CUDA device is available (use --device cpu)")


def resolve_device(device: str | None) -> str:
    """The device a run uses: the one asked for (checked), else `cuda` when this machine has one, else cpu."""
    check_device(device)
    return device or ("cuda" if cuda_available() else "cpu")
