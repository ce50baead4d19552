"""The rollout package (which the loop imports) does not import Ray: RayRolloutEngine imports it when built."""

import subprocess
import sys


def test_rollout_package_does_not_import_ray():
    code = "import sys, pc_pipelines.rollout as r; print(r.RayRolloutEngine.__name__, 'ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["RayRolloutEngine", "False"]
