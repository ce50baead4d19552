"""Dagster automation: what launches the assets. The jobs (``jobs.py``: ``start_run``, ``train_segment``, ``report``),
the ``advance_runs`` sensor (``sensors.py``) and the ``advance_runs_in_window`` schedule (``schedules.py``), beside
``assets/`` as in Dagster's project layout. ``pc_pipelines_dagster/definitions.py`` assembles them with the assets
and resources."""
