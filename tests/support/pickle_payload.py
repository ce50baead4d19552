"""The pickle payload the tests plant in checkpoints, warm starts and verl's files: unpickling it runs
``touch MARKER`` (what an attacker's payload would do, harmlessly), so the marker file shows whether it ran."""

import os
from pathlib import Path


class Payload:
    """Unpickling it runs ``touch marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))
