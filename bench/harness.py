"""The benchmarks' harness: timing, the CPU other processes use, peak memory, targets, the machine.

Every figure is the median of several runs (`median`); `quiet` times one run and
logs how many cores other processes used meanwhile, waiting for a quiet moment
and redoing a disturbed run when --wait-idle asks for it; `load_meter` does the
same for a whole section.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def target(section: str, name: str, value: float | None, op: str, threshold: float, unit: str = "", why: str = "") -> dict[str, Any]:
    """One target: value `op` threshold. `margin` is value / threshold (>= 1 passes for >=, <= 1 for <=)."""
    if value is None:
        return {"section": section, "name": name, "value": None, "op": op, "threshold": threshold, "unit": unit, "pass": None, "why": why}
    ok = value >= threshold if op == ">=" else value <= threshold
    return {
        "section": section,
        "name": name,
        "value": round(float(value), 4),
        "op": op,
        "threshold": threshold,
        "unit": unit,
        "pass": bool(ok),
        "margin": round(float(value) / threshold, 3) if threshold else None,
        "why": why,
    }


# --------------------------------------------------------------------------- CPU load


def _cpu_jiffies() -> tuple[int, int, int]:
    """(busy, idle, steal) jiffies of the whole machine from /proc/stat."""
    try:
        with open("/proc/stat") as handle:
            parts = [int(x) for x in handle.readline().split()[1:]]
    except OSError:
        return 0, 0, 0
    user, nice, system, idle, iowait, irq, softirq, steal = (parts + [0] * 8)[:8]
    return user + nice + system + irq + softirq, idle + iowait, steal


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@contextmanager
def load_meter(out: dict[str, Any]) -> Iterator[None]:
    """Record how many cores' worth of CPU other processes used while the block ran."""
    hz = os.sysconf("SC_CLK_TCK")
    busy0, _, steal0 = _cpu_jiffies()
    own0, wall0 = _own_cpu(), time.perf_counter()
    try:
        yield
    finally:
        busy1, _, steal1 = _cpu_jiffies()
        wall = time.perf_counter() - wall0
        others = (busy1 - busy0) / hz - (_own_cpu() - own0)
        out["load"] = {
            "seconds": round(wall, 2),
            "others_cores": round(max(0.0, others) / wall, 2) if wall > 0 else None,
            "steal_cores": round((steal1 - steal0) / hz / wall, 2) if wall > 0 else None,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }


def wait_idle(max_wait: float, threshold: float = 0.2) -> float:
    """Wait (at most max_wait s) until other processes use < threshold cores; returns the last reading."""
    hz = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + max_wait
    while True:
        busy0, _, _ = _cpu_jiffies()
        own0 = _own_cpu()
        time.sleep(0.5)
        busy1, _, _ = _cpu_jiffies()
        others = (busy1 - busy0) / hz - (_own_cpu() - own0)
        if others / 0.5 < threshold or time.monotonic() >= deadline:
            return round(max(0.0, others / 0.5), 2)


class Quiet:
    """How `quiet` runs timed work: wait for other processes to go quiet, redo a disturbed run.

    With max_wait 0 (the default) runs are taken as they come; each is still logged
    with the CPU other processes used meanwhile, so a disturbed figure shows.
    """

    def __init__(self) -> None:
        self.max_wait = 0.0
        self.threshold = 0.2  # cores used by other processes that count as a disturbance
        self.retries = 2
        self.log: list[float] = []
        self.redone = 0
        self.last_cpu = 0.0  # this process's (and its reaped children's) CPU seconds in the last run

    def reset(self) -> dict[str, Any]:
        summary = {
            "timed_runs": len(self.log),
            "redone": self.redone,
            "others_cores_max": round(max(self.log), 2) if self.log else None,
            "others_cores_median": round(median(self.log), 2) if self.log else None,
        }
        self.log, self.redone = [], 0
        return summary


QUIET = Quiet()


def quiet(fn: Callable[[], Any]) -> tuple[float, Any]:
    """timed(fn), started when other processes are quiet (--wait-idle) and redone if they were not."""
    for attempt in range(QUIET.retries + 1):
        if QUIET.max_wait > 0:
            wait_idle(QUIET.max_wait, QUIET.threshold)
        meter: dict[str, Any] = {}
        cpu0 = _own_cpu()
        with load_meter(meter):
            seconds, result = timed(fn)
        QUIET.last_cpu = _own_cpu() - cpu0
        others = meter["load"]["others_cores"] or 0.0
        if QUIET.max_wait <= 0 or others < QUIET.threshold or attempt == QUIET.retries:
            QUIET.log.append(others)
            return seconds, result
        QUIET.redone += 1
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- processes and memory


def bin_path(name: str) -> str:
    """A console script of this interpreter's environment (falls back to PATH)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else (shutil.which(name) or name)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def shell(cmd: str, env: dict[str, str]) -> bytes:
    """stdout of a bash pipeline (pipefail); a failure is a RuntimeError with the end of its stderr."""
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[-300:]}")
    return done.stdout


def maxrss_bytes() -> int:
    """Peak resident set size of this process, in bytes.

    VmHWM from /proc/self/status where there is one: Linux's ru_maxrss survives
    exec, so a worker started by a big parent reports the parent's peak (a 20,000
    x 384 matrix "used" 4 GB); VmHWM belongs to the process's own address space.
    Elsewhere ru_maxrss (KiB on Linux, bytes on macOS).
    """
    try:
        status = Path("/proc/self/status").read_text()
        found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
        if found:
            return int(found.group(1)) * 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


# --------------------------------------------------------------------------- the machine and the report


def machine() -> dict[str, Any]:
    """Cores, CPU model, memory, numpy's BLAS (numpy.show_config and threadpoolctl), versions."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        info["cpu"] = model.group(1).strip() if model else platform.processor()
        flags = set((re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M) or re.search("(.*)", "")).group(1).split())
        info["cpu_flags"] = sorted(flags & {"avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8"})
        info["hypervisor"] = "hypervisor" in flags
        mhz = re.search(r"^cpu MHz\s*:\s*(.+)$", cpuinfo, re.M)
        info["cpu_mhz"] = float(mhz.group(1)) if mhz else None
    except OSError:
        info["cpu"] = platform.processor()
    try:
        meminfo = Path("/proc/meminfo").read_text()
        info["memory_gib"] = round(int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1)) / 2**20, 1)  # type: ignore[union-attr]
    except (OSError, AttributeError):
        pass
    info["numpy"] = np.__version__
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        info["numpy_blas"] = {k: blas.get(k) for k in ("name", "version", "openblas configuration")}
    except Exception as err:  # older numpy has no mode="dicts"
        info["numpy_blas"] = {"error": str(err)}
    try:
        from threadpoolctl import threadpool_info

        info["threadpools"] = [
            {k: p.get(k) for k in ("user_api", "internal_api", "version", "architecture", "num_threads", "threading_layer")}
            for p in threadpool_info()
        ]
    except ImportError:
        info["threadpools"] = "threadpoolctl is not installed (pip install -e '.[bench]')"
    versions: dict[str, str | None] = {}
    for name in ("onnxruntime", "tokenizers", "faiss", "bm25s", "scipy", "orjson"):
        try:
            module = __import__(name)
            versions[name] = getattr(module, "__version__", "?")
        except ImportError:
            versions[name] = None
    info["versions"] = versions
    info["parallel"] = _first_line([shutil.which("parallel") or "parallel", "--version"])
    return info


def _first_line(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip().splitlines() or [None])[0]


def git_state() -> dict[str, Any]:
    head = _first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    status = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "*.py"], capture_output=True, text=True)
    return {"commit": head, "dirty_py": [line[3:] for line in status.stdout.splitlines()]}


def fmt(x: Any, digits: int = 0) -> str:
    """A figure for a report table: `-` for none, yes/no, thousands separated."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int | float):
        return f"{x:,.{digits}f}"
    return str(x)
