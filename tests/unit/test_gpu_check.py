"""The GPU check prepared for a lent device (etc/gpu/check.py) keeps working: its dry run on the CPU passes and
writes the report a device run publishes (the device run itself needs a lent GPU)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_checks_dry_run_on_the_cpu(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "etc" / "gpu" / "check.py"), "--out", str(tmp_path),
                          "--device", "cpu"], capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["greedy_equal_share"] == 1.0
    assert report["seeded_sampling_repeats"] is True and report["other_seed_differs"] is True
    assert report["rollouts_per_s_cpu"] > 0
