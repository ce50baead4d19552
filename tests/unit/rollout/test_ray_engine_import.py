"""The rollout package (which the run layer imports) imports neither torch nor Ray: ``RayRolloutEngine`` is exported
lazily (its module, with torch, on first access) and imports Ray when an engine is built."""

import subprocess
import sys


def test_rollout_package_does_not_import_ray():
    code = ("import sys, pc_pipelines.rollout as r; t = 'torch' in sys.modules; "
            "print(t, r.RayRolloutEngine.__name__, 'torch' in sys.modules, 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "RayRolloutEngine", "True", "False"]
