#!/usr/bin/env python3
"""The library's areas depend one way: computes the folder-level include graph of src/ and
include/frugal/ and fails on an include that goes up the order docs/design.md writes down (which
also rules out loops), on an area the order does not list, and on an include of another area's
detail/ folder.

    python3 tests/core/layering_test.py <repository root>

An area is a folder under src/ or include/frugal/ (src/core and include/frugal/core are one area;
include/frugal/errors.hpp is the area `errors`, log.hpp `log`, frugal.hpp the umbrella, exempt).
Includes are resolved as the build resolves them: "frugal/<area>/..." (public), "<area>/..."
(src/ on the include path), anything else relative to the including file's own area."""
import os
import re
import sys

SOURCE_SUFFIXES = ('.hpp', '.cpp', '.h', '.cu', '.cuh')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ORDER_BLOCK = re.compile(r'<!-- layer order -->\s*```text\n(.*?)```', re.S)


def read_order(design_md):
    """The areas from the bottom layer up: one line per layer, areas of a layer separated by
    spaces; an area may include areas of lower lines and of its own line only if listed before it."""
    with open(design_md, encoding='utf-8') as f:
        match = ORDER_BLOCK.search(f.read())
    if not match:
        sys.exit(f'{design_md}: no "<!-- layer order -->" block followed by a ```text fence')
    rank = {}
    for line in match.group(1).splitlines():
        line = line.split('#', 1)[0].strip()
        for area in line.replace('<', ' ').split():
            if area in rank:
                sys.exit(f'{design_md}: area {area} listed twice in the layer order')
            rank[area] = len(rank)
    return rank


def area_of(rel):
    parts = rel.split('/')
    if parts[0] == 'src':
        return parts[1] if len(parts) > 2 else None
    # include/frugal/<area>/... or include/frugal/<name>.hpp
    return parts[2] if len(parts) > 3 else os.path.splitext(parts[2])[0]


def included_area(include, own_area, areas):
    parts = include.split('/')
    if parts[0] == 'frugal':
        return (parts[1] if len(parts) > 2 else os.path.splitext(parts[1])[0]), parts
    if len(parts) > 1 and parts[0] in areas:
        return parts[0], parts
    return own_area, parts  # relative to the including file


def main(root):
    rank = read_order(os.path.join(root, 'docs', 'design.md'))
    files = []
    for base in ('src', os.path.join('include', 'frugal')):
        for folder, _, names in os.walk(os.path.join(root, base)):
            files += [os.path.relpath(os.path.join(folder, n), root) for n in names if n.endswith(SOURCE_SUFFIXES)]
    areas = {area_of(f) for f in files} - {None}
    problems = []
    for area in sorted(areas - set(rank) - {'frugal'}):
        problems.append(f'area {area} is not in the layer order of docs/design.md')
    edges = set()
    for rel in sorted(files):
        own = area_of(rel)
        if own in (None, 'frugal'):
            continue  # the umbrella header includes everything by design
        with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target, parts = included_area(match.group(1), own, areas)
                if target == own:
                    continue
                where = f'{rel}:{number}: #include "{match.group(1)}"'
                if 'detail' in parts:
                    problems.append(f'{where}: {own} reaches into the detail/ of {target}')
                if own in rank and target in rank and rank[target] > rank[own]:
                    problems.append(f'{where}: {own} includes {target}, which sits above it in the layer order')
                edges.add((own, target))
    print(f'{len(files)} files, {len(areas)} areas, {len(edges)} area-to-area edges')
    for problem in problems:
        print('FAIL', problem)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')))
