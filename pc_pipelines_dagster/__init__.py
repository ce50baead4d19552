"""The Dagster project around the ``pc_pipelines`` library, laid out like Dagster's project template: the code location
(``definitions.py``, which only assembles; ``workspace.yaml`` loads it), the assets (``assets/``), what launches them
(``automation/``: jobs, the sensor, the schedule), the resources (``resources/``), and ``make demo``'s driver
(``demo.py``: the whole graph headless). The library never imports this package."""
