"""What machine this is, for bench headers and per-CPU caches (the tuning cache's key)."""
from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path


def default_threads() -> int:
    """Threads a native backend uses when none are asked for: the cores this process may run
    on (its CPU affinity, as `taskset` or a container's cpuset limit it), else all cores."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@cache
def l2_cache_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """The size of the L2 cache of the first core (Linux sysfs: `root` holds its caches'
    index* folders), None where it cannot be read; read once (every compile asks)."""
    try:
        for index in sorted(root.glob("index*")):
            if (index / "level").read_text().strip() != "2" or \
                    (index / "type").read_text().strip() not in ("Unified", "Data"):
                continue
            size = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
            return int(size.rstrip("KM")) * scale
    except (OSError, ValueError):
        return None
    return None
