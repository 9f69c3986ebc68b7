"""The device process's side of `/metrics`: its rows of the statistics block, and where its GPU is.

A scrape reads GPU memory through NVML, in a frontend. NVML and CUDA may number the same GPUs
differently (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER), so the device process, which knows which
GPU it drives, publishes that GPU's PCI address, and the scrape asks NVML for exactly that one.
"""

from __future__ import annotations

import logging

from sie.metrics.block import StatsBlock
from sie.metrics.recorders import DeviceRecorder
from sie.shm.control import ControlBlock
from sie.shm.names import Namespace

log = logging.getLogger(__name__)


def attach_device_stats(
    namespace: Namespace, control: ControlBlock, index: int, device: str, *, instrumentation: bool
) -> tuple[StatsBlock, DeviceRecorder]:
    stats = StatsBlock.attach(namespace.stats())
    recorder = DeviceRecorder(stats, index, control, instrumentation=instrumentation)
    if device.startswith("cuda"):
        _publish_pci(recorder, device)
    return stats, recorder


def _publish_pci(recorder: DeviceRecorder, device: str) -> None:
    import torch

    try:
        props = torch.cuda.get_device_properties(torch.device(device))
        recorder.set_pci(int(props.pci_domain_id), int(props.pci_bus_id), int(props.pci_device_id))
    except (AttributeError, RuntimeError, AssertionError) as exc:  # older torch, or no CUDA after all
        log.warning("GPU memory will not be reported: no PCI address for %s (%s)", device, exc)
