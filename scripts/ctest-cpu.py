#!/usr/bin/env python3
"""The CPU time of every test of one ctest run, and of every program the tests started.

ctest reports wall time only; what a 2-core machine can run in ten minutes is bounded by CPU time.
Linux process accounting (Debian's `acct`) records every process that ends, with its parent, so one
run gives each test's whole process tree:

    accton /var/log/account/pacct          # as root; `accton off` afterwards
    ctest --preset default > ctest.log
    python3 scripts/ctest-cpu.py ctest.log [PACCT] [TOP]

The tests are matched to ctest's children by start order (ctest starts them in the order of its
"Start N:" lines): by start second, then process id (ids wrap at pid_max, 32768 here, but not twice
within a second). A process still running when accounting stopped, or one
that outlived its parent, is missed.
"""
import collections
import datetime
import re
import subprocess
import sys


def read_processes(pacct):
    rows = subprocess.run(["dump-acct", pacct], capture_output=True, text=True, check=True).stdout.splitlines()
    processes = {}
    for row in rows:
        f = [x.strip() for x in row.split("|")]
        # comm | version | user | system | elapsed | uid | gid | memory | io | pid | ppid | ... (ticks of 1/100 s)
        processes[int(f[9])] = {"comm": f[0], "cpu": (float(f[2]) + float(f[3])) / 100.0,
                                "wall": float(f[4]) / 100.0, "ppid": int(f[10]),
                                "start": datetime.datetime.strptime(" ".join(f[14].split()), "%a %b %d %H:%M:%S %Y")}
    return processes


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    log = sys.argv[1]
    pacct = sys.argv[2] if len(sys.argv) > 2 else "/var/log/account/pacct"
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    processes = read_processes(pacct)
    children = collections.defaultdict(list)
    for pid, p in processes.items():
        children[p["ppid"]].append(pid)
    ctests = [pid for pid, p in processes.items() if p["comm"] == "ctest"]
    if not ctests:
        sys.exit(f"{pacct}: no ctest process recorded (was accounting on for the whole run?)")
    root = max(ctests, key=lambda pid: processes[pid]["wall"])

    def tree_cpu(pid, by_program):
        by_program[processes[pid]["comm"]].append(processes[pid]["cpu"])
        return processes[pid]["cpu"] + sum(tree_cpu(c, by_program) for c in children[pid])

    names = [line.split(": ", 1)[1].strip() for line in open(log) if re.match(r"\s+Start\s+\d+:", line)]
    tests = sorted(children[root], key=lambda pid: (processes[pid]["start"], pid))
    if len(tests) != len(names):
        print(f"warning: {len(tests)} processes under ctest, {len(names)} tests started in {log}")
    by_program = collections.defaultdict(list)
    rows = sorted(((tree_cpu(pid, by_program), processes[pid]["wall"], name) for pid, name in zip(tests, names)), reverse=True)
    print(f"ctest: {processes[root]['wall']:.1f} s wall; its tests: {sum(r[0] for r in rows):.1f} CPU-s")
    print(f"\n{'CPU-s':>7} {'wall s':>7}  test (the {top} most CPU)")
    for cpu, wall, name in rows[:top]:
        print(f"{cpu:7.1f} {wall:7.1f}  {name}")
    print(f"\n{'CPU-s':>7} {'starts':>6} {'each':>5}  program (first 15 characters)")
    for comm, cpus in sorted(by_program.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"{sum(cpus):7.1f} {len(cpus):6d} {sum(cpus) / len(cpus):5.2f}  {comm}")


if __name__ == "__main__":
    main()
