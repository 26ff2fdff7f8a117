"""What every bench script shares: timing a child process and describing the machine."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


def measured(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process (its own, via wait4)."""
    wall, rss, _ = measured_cpu(cmd)
    return wall, rss


def measured_cpu(cmd: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MiB) and CPU seconds (user + system, all threads) of a child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    # Linux carries the parent's RSS high-water mark into a child across (v)fork + exec, so a
    # child's ru_maxrss is at least the parent's peak: a figure that low says nothing of the child.
    parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if usage.ru_maxrss <= parent:
        print(f"  warning: peak RSS {usage.ru_maxrss / 1024:,.0f} MiB may be this bench's own")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, Python {platform.python_version()}"
