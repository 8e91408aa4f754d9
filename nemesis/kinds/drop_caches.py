"""drop-caches: evict the kernel's page cache on a broker's node (it refills by itself)."""

from kafkaesque_harness.nemesis.fault import PAGE_CACHE_DROP, FaultKind, lazy

KIND = FaultKind("drop-caches", "evict the page cache on a random broker's node, so its next reads go to the disk",
                 lazy("kafkaesque_harness.nemesis.faults:DropCachesNemesis"), abilities=(PAGE_CACHE_DROP,))
