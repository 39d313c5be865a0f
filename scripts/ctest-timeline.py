#!/usr/bin/env python3
"""How full the cores were during a ctest run: rebuilds the run's timeline from its log (a test
starts after the completion printed before its "Start" line and lasts the seconds its result line
gives) and adds up the shares the tests declare (frugal_test_cpu in tests/CMakeLists.txt), then
prints how long the declared load stood at each level. Long stretches well below the pool mean a
core stood idle.

  ctest --preset default > ctest.log; python3 scripts/ctest-timeline.py ctest.log [BUILD_DIR]
"""
import json
import re
import subprocess
import sys

START = re.compile(r'\s*Start +(\d+): (.*)')
RESULT = re.compile(r'\s*\d+/\d+ Test +#(\d+): .*? \.{3,}.*?(?:Passed|Skipped|Failed|Timeout)\s+([\d.]+) sec')


def declared_shares(build):
    listing = json.loads(subprocess.run(['ctest', '--show-only=json-v1'], cwd=build, check=True,
                                        capture_output=True, text=True).stdout)
    shares = {}
    for test in listing['tests']:
        share = 100  # Catch2's tests: one core
        for prop in test.get('properties', []):
            if prop['name'] == 'RESOURCE_GROUPS':
                share = prop['value'][0]['requirements'][0]['slots']
        shares[re.sub(r'\s+', '', test['name'])] = share
    return shares


def main(log_path, build):
    shares = declared_shares(build)
    start, names, events, now = {}, {}, [], 0.0
    with open(log_path, errors='replace') as f:
        for line in f:
            match = START.match(line)
            if match:
                number = int(match.group(1))
                start[number], names[number] = now, match.group(2)
                continue
            match = RESULT.match(line)
            if match and int(match.group(1)) in start:
                number, seconds = int(match.group(1)), float(match.group(2))
                now = max(now, start[number] + seconds)
                share = shares.get(re.sub(r'\s+', '', names[number]), 100)
                events += [(start[number], share), (start[number] + seconds, -share)]
    level, last, spent = 0, 0.0, {}
    for time, change in sorted(events):
        spent[level] = spent.get(level, 0.0) + time - last
        level, last = level + change, time
    print(f'{len(events) // 2} tests, {now:.1f} s')
    for level in sorted(spent):
        if spent[level] >= 1:
            print(f'declared load {level:4d} slots for {spent[level]:7.1f} s')


if __name__ == '__main__':
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else 'build')
