#!/usr/bin/env python3
"""tests/ mirrors src/: every test folder (its name is its ctest label) says which code it tests,
in the table docs/design.md writes down, and a test named after a source file
(tests/<folder>/<name>_test.cpp|.sh|.py for src/.../<name>.cpp) lives in the folder that owns
that source. Fails on a test folder the table does not list, on a source the table gives to no
folder, and on a test in another folder than its source's.

    python3 tests/core/test_layout_test.py <repository root>

A table line is a folder and the paths it owns (folders or files without their suffix); the
longest path that contains a source decides its owner, so `src/policies/recovery` can go to
`recovery` while the rest of `src/policies` goes elsewhere."""
import os
import re
import sys

TABLE_BLOCK = re.compile(r'<!-- test folders -->\s*```text\n(.*?)```', re.S)
SOURCE_SUFFIXES = ('.cpp', '.cu', '.py')
TEST_NAME = re.compile(r'^(.*)_test\.(cpp|sh|py)$')
OWNED_TREES = ('src', 'tools', 'examples')
NOT_TEST_FOLDERS = {'support', 'fuzz', 'reference', 'consumer'}  # helpers, fuzz targets, reference scripts


def read_table(design_md):
    with open(design_md, encoding='utf-8') as f:
        match = TABLE_BLOCK.search(f.read())
    if not match:
        sys.exit(f'{design_md}: no "<!-- test folders -->" block followed by a ```text fence')
    owner = {}
    for line in match.group(1).splitlines():
        words = line.split('#', 1)[0].split()
        if not words:
            continue
        folder, paths = words[0], words[1:]
        for path in paths:
            if path in owner:
                sys.exit(f'{design_md}: {path} is given to both {owner[path]} and {folder}')
            owner[path.rstrip('/')] = folder
    return owner


def owner_of(source, owner):
    """The folder of the longest table path that is `source` (without suffix) or contains it."""
    stem = os.path.splitext(source)[0]
    best = None
    for path, folder in owner.items():
        if stem == path or stem.startswith(path + '/'):
            if best is None or len(path) > len(best[0]):
                best = (path, folder)
    return best[1] if best else None


def main(root):
    owner = read_table(os.path.join(root, 'docs', 'design.md'))
    folders = set(owner.values())
    problems = []
    sources_by_stem = {}
    for tree in OWNED_TREES:
        for folder, _, names in os.walk(os.path.join(root, tree)):
            for name in names:
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                rel = os.path.relpath(os.path.join(folder, name), root)
                sources_by_stem.setdefault(os.path.splitext(name)[0], []).append(rel)
                if tree == 'src' and owner_of(rel, owner) is None:
                    problems.append(f'{rel}: no test folder owns it (docs/design.md, test folders)')
    tests = 0
    tests_root = os.path.join(root, 'tests')
    for folder in sorted(os.listdir(tests_root)):
        path = os.path.join(tests_root, folder)
        if not os.path.isdir(path) or folder in NOT_TEST_FOLDERS:
            continue
        names = sorted(n for n in os.listdir(path) if TEST_NAME.match(n))
        if names and folder not in folders:
            problems.append(f'tests/{folder}/ holds tests but is not a folder of docs/design.md\'s test folders')
        for name in names:
            tests += 1
            subject = TEST_NAME.match(name).group(1)
            sources = [s for s in sources_by_stem.get(subject, []) if not s.startswith('tests/')]
            homes = {owner_of(s, owner) for s in sources} - {None}
            if homes and folder not in homes:
                problems.append(f'tests/{folder}/{name} tests {", ".join(sorted(sources))}: it belongs in '
                                f'{" or ".join("tests/" + h + "/" for h in sorted(homes))}')
    print(f'{tests} tests in {len(folders)} folders, {len(owner)} owned paths')
    for problem in problems:
        print('FAIL', problem)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')))
