"""What the benchmarks say about the machine they ran on: the CPU's name, printed beside every figure
(absolute figures differ between an AVX2-only host and one with AVX-512 bf16 units)."""
from __future__ import annotations

import platform


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
