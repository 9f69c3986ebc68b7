"""The device owner: ring polling, batch forming, inference loop, model adapters."""
