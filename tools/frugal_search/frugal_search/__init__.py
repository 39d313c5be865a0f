"""frugal-search: multi-fidelity, cost-aware search over a Frugal program's configuration keys.

Successive halving / ASHA and Hyperband schedule the trials (schedule.py), Optuna samples them and
keeps the study (study.py), each trial is the Frugal program itself, paused at its rungs and resumed
from its exact checkpoint (program.py), and the driver (driver.py) runs them in parallel, survives
kill -9, and reports the Pareto front and the saving against a grid (report.py). docs/search.md.
"""
