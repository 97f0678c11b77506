"""Local training primitives: losses, augmentation, parameter ops, the local loop."""
