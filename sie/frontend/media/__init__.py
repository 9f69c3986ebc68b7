"""Image and audio bytes -> the fixed-shape arrays a device takes (decoding runs in the frontends)."""
