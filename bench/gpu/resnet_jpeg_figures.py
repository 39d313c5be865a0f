"""The ResNet-50 feeding figures of issue 31 from the GPU check's run directories: steady img/s
(the median of the metrics windows after the first) and data-wait fraction of each JPEG run,
against the synthetic run of the same precision in the same check. Appends one JSON line each
(name, value, unit, baseline, ratio, command) to RESULTS.

  python resnet_jpeg_figures.py RESULTS LOGS
"""
import json
import os
import statistics
import sys


def steady(run_dir):
    rows = []
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("event") == "train" and "samples_per_s" in r:
                rows.append(r)
    rows = rows[1:] or rows  # the first window holds cuDNN's autotuning and the pipeline filling up
    if not rows:
        return None
    return (statistics.median(r["samples_per_s"] for r in rows), statistics.median(r.get("data_wait_fraction", 0.0) for r in rows))


def main(results, logs):
    command = "bash bench/gpu/run.sh (stages resnet_*)"
    with open(results, "a") as out:
        for precision in ("bf16", "fp16"):
            synthetic = steady(os.path.join(logs, f"resnet_synthetic_{precision}"))
            for decode in ("cpu", "gpu"):
                run = steady(os.path.join(logs, f"resnet_jpeg_{decode}_{precision}"))
                if run is None or synthetic is None:
                    continue
                for name, value, unit, baseline in (
                        (f"resnet.jpeg_{decode}_decode_{precision}", run[0], "img/s", synthetic[0]),
                        (f"resnet.jpeg_{decode}_decode_{precision}_data_wait", run[1], "fraction", None)):
                    ratio = value / baseline if baseline else None
                    out.write(json.dumps({"name": name, "value": value, "unit": unit, "baseline": baseline, "ratio": ratio,
                                          "command": command}) + "\n")
                    print(f"{name}: {value:.4g} {unit}" + (f" (synthetic {baseline:.4g}, x{ratio:.3f})" if baseline else ""))


if __name__ == "__main__":
    main(*sys.argv[1:])
