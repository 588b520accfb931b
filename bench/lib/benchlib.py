#!/usr/bin/env python3
"""What the Python drivers share (bench/all, bench/scale): the machine line,
load averages, child processes run in their own process group with a time
limit, and the C baselines they compile. Imported, never run:

    sys.path.insert(0, os.path.join(ROOT, "bench", "lib")); import benchlib
"""
import os
import re
import signal
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine():
    model, flags = "?", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    ours = ["avx2", "pclmulqdq", "vpclmulqdq", "avx512f", "avx512bw", "gfni", "sse4_2"]
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "flags": [f for f in ours if f in flags],
        "missing_flags": [f for f in ours if f not in flags],
        "kernel": os.uname().release,
    }


def machine_line(m):
    """The one-line machine description both drivers print and log."""
    return (f"{m['cpu']}, {m['cpus']} CPUs, kernel {m['kernel']}; flags {' '.join(m['flags']) or '-'}"
            f" (no {' '.join(m['missing_flags']) or '-'})")


def run(cmd, timeout, env=None, cwd=ROOT):
    """Runs CMD in its own process group; kills the group on timeout (or on
    any exception, Ctrl-C included). Returns (rc, stdout, stderr); rc None
    on timeout."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, err = p.communicate()
        return None, out, err
    except BaseException:
        kill_group(p)
        raise


def kill_group(p):
    # SIGTERM first: the bash drivers' EXIT traps stop their servers and
    # remove their temporary directories.
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 3)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def cc(target_dir, name):
    """Compiles bench/peers/NAME.c into TARGET_DIR; returns the executable's
    path, or raises RuntimeError with the compiler's message."""
    exe = os.path.join(target_dir, name)
    rc, _, err = run(["cc", "-O2", "-pthread", "-o", exe, f"bench/peers/{name}.c"], 120)
    if rc != 0:
        raise RuntimeError(f"cc {name}.c failed: {(err or '').strip()[:200]}")
    return exe


def pipeline_ceiling(exe, threads, frames):
    """Mpps of bench/peers/pipeline-ceiling.c: the pipeline's per-frame work in C,
    THREADS pinned threads sharing nothing."""
    rc, out, err = run([exe, str(threads), str(frames)], 120)
    m = re.search(r"([\d.]+) Mpps total", out or "")
    if rc != 0 or not m:
        raise RuntimeError(f"{exe} {threads}: rc {rc}: {(err or '').strip()[-200:]}")
    return float(m.group(1))
