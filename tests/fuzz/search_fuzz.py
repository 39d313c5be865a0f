#!/usr/bin/env python3
"""Fuzz target (atheris, libFuzzer's engine for Python) for frugal-search's parsers of outside
input: search-space flags and [space]/[search] TOML files, --target, and the metrics.jsonl records
a trial writes and the driver reads back. A SearchError (the user's mistake, named) is the only
exception allowed; anything else is a finding. scripts/fuzz.sh runs it as the target `search`.
"""
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "frugal_search"))
    from frugal_search import cli, program, report
    from frugal_search import space as space_mod
    from frugal_search.errors import SearchError

METRICS = os.path.join(tempfile.mkdtemp(prefix="frugal_search_fuzz_"), "metrics.jsonl")
TOML = os.path.join(os.path.dirname(METRICS), "search.toml")


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kind = fdp.ConsumeIntInRange(0, 3)
    text = fdp.ConsumeUnicodeNoSurrogates(4096)
    try:
        if kind == 0:
            params = [space_mod.parse_flag(line) for line in text.split("\n") if line]
            if params:
                space = space_mod.build(params)
                space.grid(2)
        elif kind == 1:
            with open(TOML, "w", encoding="utf-8") as f:
                f.write(text)
            _, params = cli.load_file(TOML)
            if params:
                space_mod.build(params).grid(2)
        elif kind == 2:
            report.parse_target(text)
        else:
            with open(METRICS, "w", encoding="utf-8") as f:
                f.write(text)
            metrics = program.read_metrics(os.path.dirname(METRICS))
            metrics.value_at("loss", "epochs", 1)
            metrics.value_at("accuracy", "steps", 3)
            metrics.summary("samples_per_s")
            metrics.summary("peak_memory_mb")
    except SearchError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
