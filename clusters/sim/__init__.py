"""The deterministic simulator (issue 41): the reference cluster's own node programs, every node in one
process on one event loop with virtual time, the network, disks and clocks simulated under one seed.

loop.py (the event loop, processes), network.py (streams over an in-memory network), disk.py (the
page-cache model of a power cut), cluster.py (SimCluster: nodes, faults).
"""
