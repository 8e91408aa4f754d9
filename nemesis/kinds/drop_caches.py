"""drop-caches: evict the kernel's page cache on a broker's node (it refills by itself)."""

from nemesis.fault import FaultKind, lazy

KIND = FaultKind("drop-caches", "evict the page cache on a random broker's node, so its next reads go to the disk",
                 lazy("nemesis.faults:DropCachesNemesis"), abilities=("drop-caches",))
