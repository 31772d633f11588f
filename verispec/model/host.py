"""Small host values on their way to the device, and back, without needless waits.

On a GPU, `torch.tensor(values, device="cuda")` and `tensor.to("cuda")` copy from pageable memory, and the host
waits until the device has run everything queued before the copy; so does every read of a device value. Each such
wait empties the device's queue, so the host can no longer queue the next kernels while the device runs the
last. `upload` copies through pinned memory, asynchronously: the device reads the values in stream order and the
host goes on. (PyTorch's pinned-memory cache keeps a block until the copy from it is done.) On the CPU both are
plain tensors.
"""
from __future__ import annotations

import torch


def upload(values, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Host values (a list, or a CPU tensor) -> a tensor on `device`, queued without waiting for the device."""
    host = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    if device.type != "cuda" or host.device.type != "cpu":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)

