"""``python -m pc_pipelines.cli``: the same as ``pilot-commit``."""

from . import main

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
