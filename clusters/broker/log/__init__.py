"""Segmented on-disk log: record batches, CRCs, leader-epoch cache, checkpoints, recovery."""
