"""Reads a TensorBoard event directory with TensorBoard's own loader and prints its scalars as
JSON: {"version": "...", "scalars": [[tag, step, value], ...]} in file order."""
import json
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util

files = sorted(Path(sys.argv[1]).glob("events.out.tfevents.*"))
if not files:
    sys.exit(f"no event files in {sys.argv[1]}")
version, scalars = None, []
for f in files:
    for event in EventFileLoader(str(f)).Load():  # checks both CRCs of every record
        if event.HasField("file_version"):
            version = event.file_version
        for v in event.summary.value:
            # The loader migrates simple_value into a scalar tensor.
            value = float(tensor_util.make_ndarray(v.tensor)) if v.HasField("tensor") else v.simple_value
            scalars.append([v.tag, event.step, value])
print(json.dumps({"version": version, "scalars": scalars, "files": len(files)}))
