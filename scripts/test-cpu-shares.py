#!/usr/bin/env python3
"""What each ctest test uses of the CPU: runs the tests one at a time on an otherwise idle machine
and prints, per test, its wall time, its CPU time (ctest's children, user + system) and their ratio,
the share a test declares with frugal_test_cpu(SHARE PROCESSORS SECONDS ...) in tests/CMakeLists.txt.

  python3 scripts/test-cpu-shares.py [BUILD_DIR] [NAME_REGEX]     # e.g. build 'torchrun|remote:'
"""
import json
import re
import resource
import subprocess
import sys
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
pattern = re.compile(sys.argv[2]) if len(sys.argv) > 2 else None
listing = json.loads(subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True, capture_output=True, text=True).stdout)
for test in listing["tests"]:
    name = test["name"]
    if pattern is not None and not pattern.search(name):
        continue
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
    run = subprocess.run(["ctest", "-R", "^" + re.escape(name) + "$", "--timeout", "600"], cwd=build, capture_output=True, text=True)
    wall, after = time.time() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = "passed" if "100% tests passed" in run.stdout else "FAILED"
    print(f"{wall:7.1f} s wall {cpu:7.1f} s CPU  share {round(cpu / wall * 10) * 10:4d}  {result}  {name}", flush=True)
