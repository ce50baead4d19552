"""The research studies on top of the pipeline: the rollout-efficiency studies, their calibration and diagnostics
(one script each, see README.md here) and ``study.py``, the library they share. This package imports
``pc_pipelines``; nothing in ``pc_pipelines/`` or ``pc_pipelines_dagster/`` imports it
(tests/unit/test_layering.py). Its scripts run from the checkout (``python research/<study>.py``), which puts it on
the path; it is not installed with the package."""
