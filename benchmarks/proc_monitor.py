"""Runs a command and measures the memory of its whole process tree, from /proc.

No psutil: every ``interval`` seconds the monitor lists /proc, rebuilds the
parent -> children map, and for each process of the tree (the launcher and
every descendant, e.g. Beam's SDK worker subprocesses or a multiprocessing
pool) reads ``VmHWM`` (the kernel's own per-process peak RSS, so a short spike
between two polls is not missed while the process lives) and ``VmRSS``
(current RSS, summed over the tree at each poll), and ``RssFile`` (the part of
VmRSS that is mapped files: shared libraries, and files a process maps, e.g.
RandomAccess's read-only maps of local shards, whose clean pages are the page
cache's and counted there whether mapped or read) to give the sum without it.

As a cross-check, the launcher is reaped with ``os.wait4``, whose
``ru_maxrss`` is the peak RSS of the largest single process among the
launcher and all the descendants it waited for.

Caveats: the sum of RSS counts shared pages (libraries, copy-on-write memory
of forked children) once per process, so it overstates the tree's real
footprint; a process that lives shorter than one interval may be missed
(its peak still shows in ``ru_maxrss`` if it was reaped).
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from typing import Optional, Sequence

from dcm2tfrecord.dataset.names import SHARD_SUFFIX

KIB = 1024
MIB = 1 << 20


@dataclasses.dataclass
class ProcPeak:
    pid: int
    name: str           # short command line
    hwm_kib: int = 0    # last VmHWM seen (the process's lifetime peak RSS)


@dataclasses.dataclass
class RunResult:
    cmd: list
    returncode: int
    wall_s: float
    peak_largest_mib: float          # max over processes of VmHWM
    peak_largest_name: str
    peak_sum_mib: float              # max over polls of sum(VmRSS) of the tree
    ru_maxrss_mib: float             # wait4 cross-check (largest reaped process)
    processes: list                  # [ProcPeak] every process seen
    samples: list                    # [(t, sum_rss_mib, n_procs)]
    cpu_s: float                     # user+system CPU of the tree (wait4)
    foreign_cpu_s: float             # CPU used by other processes meanwhile (noise)
    stdout_path: str
    stderr_path: str
    peak_sum_unmapped_mib: float = 0.0   # max over polls of sum(VmRSS - RssFile): file-mapped pages left out

    def tail(self, n: int = 30) -> str:
        out = []
        for path in (self.stdout_path, self.stderr_path):
            try:
                with open(path, errors="replace") as f:
                    out.extend(f.read().splitlines()[-n:])
            except OSError:
                pass
        return "\n".join(out)


def _busy_seconds() -> float:
    """System-wide non-idle CPU time so far (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_until_quiet(max_wait_s: float = 600.0, busy_cores: float = 0.15, window_s: float = 2.0,
                     log=print) -> bool:
    """Waits until the rest of the machine uses < busy_cores cores over window_s; False on timeout.

    On a shared machine a benchmark next to someone else's job measures the job.
    """
    deadline = time.time() + max_wait_s
    said = False
    while True:
        b0 = _busy_seconds()
        time.sleep(window_s)
        busy = (_busy_seconds() - b0) / window_s
        if busy < busy_cores:
            return True
        if time.time() > deadline:
            log(f"  machine still busy ({busy:.2f} cores) after {max_wait_s:.0f} s; measuring anyway")
            return False
        if not said:
            log(f"  machine busy ({busy:.2f} cores used by other processes); waiting ...")
            said = True


def _ppid(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses: the fields after the last ')' are fixed
    rest = data[data.rfind(b")") + 2:].split()
    return int(rest[1]) if len(rest) > 1 else None


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            pid = int(entry)
            ppid = _ppid(pid)
            if ppid is not None:
                children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _status(pid: int) -> tuple[int, int, int]:
    """(VmHWM, VmRSS, RssFile) in KiB; zeros for a zombie or a vanished process."""
    hwm = rss = mapped = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1])
                elif line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith(b"RssFile:"):
                    mapped = int(line.split()[1])
                    break
    except OSError:
        pass
    return hwm, rss, mapped


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    if not args:
        return "?"
    short = [os.path.basename(args[0])] + args[1:]
    if "-m" in short:                       # python -m module ...: keep the module
        i = short.index("-m")
        short = [short[0], "-m", short[i + 1]] + ([short[i + 2]] if len(short) > i + 2 else [])
    return " ".join(short)[:90]


def run_monitored(cmd: Sequence[str], env: Optional[dict] = None, cwd: Optional[str] = None,
                  interval: float = 0.2, log_prefix: str = "/tmp/bench_run",
                  timeout_s: Optional[float] = None) -> RunResult:
    stdout_path, stderr_path = f"{log_prefix}.stdout", f"{log_prefix}.stderr"
    os.makedirs(os.path.dirname(os.path.abspath(log_prefix)), exist_ok=True)
    procs: dict[int, ProcPeak] = {}
    samples = []
    peak_sum = peak_unmapped = 0
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        busy0 = _busy_seconds()
        started = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=out, stderr=err,
                                start_new_session=True)
        status = rusage = None
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            total = unmapped = 0
            tree = _tree(proc.pid)
            for p in tree:
                hwm, rss, mapped = _status(p)
                if hwm == 0:
                    continue
                peak = procs.get(p)
                if peak is None:
                    peak = procs[p] = ProcPeak(p, _name(p))
                peak.hwm_kib = max(peak.hwm_kib, hwm)
                total += rss
                unmapped += rss - mapped
            peak_sum = max(peak_sum, total)
            peak_unmapped = max(peak_unmapped, unmapped)
            samples.append((round(time.perf_counter() - started, 2), round(total / KIB, 1), len(tree)))
            if timeout_s is not None and time.perf_counter() - started > timeout_s:
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(interval)
        wall = time.perf_counter() - started
        busy = _busy_seconds() - busy0
        proc.returncode = os.waitstatus_to_exitcode(status)
    largest = max(procs.values(), key=lambda p: p.hwm_kib, default=ProcPeak(0, "?"))
    return RunResult(cmd=list(cmd), returncode=proc.returncode, wall_s=wall,
                     peak_largest_mib=largest.hwm_kib / KIB, peak_largest_name=largest.name,
                     peak_sum_mib=peak_sum / KIB, ru_maxrss_mib=rusage.ru_maxrss / KIB,
                     processes=sorted(procs.values(), key=lambda p: -p.hwm_kib),
                     samples=samples, cpu_s=rusage.ru_utime + rusage.ru_stime,
                     foreign_cpu_s=max(0.0, busy - rusage.ru_utime - rusage.ru_stime),
                     stdout_path=stdout_path, stderr_path=stderr_path,
                     peak_sum_unmapped_mib=peak_unmapped / KIB)


def bench_env() -> dict:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = "-1"
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def tfrecord_bytes(path: str) -> int:
    """Bytes of the TFRecord files under ``path`` (shards, or a single output file)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for folder, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        total += sum(os.path.getsize(os.path.join(folder, n)) for n in names if SHARD_SUFFIX in n)
    return total


def machine_description() -> str:
    import platform
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    return (f"{os.cpu_count()} cores ({cpu}), {mem} RAM, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")
