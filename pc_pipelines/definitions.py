"""The Dagster code location: the only module of the package that imports Dagster, ``assets/`` or ``resources/``.

Nothing in the package imports this module; ``workspace.yaml`` loads it. The environment (embedded local vs
Kubernetes) is chosen here, once, when the code location loads, never at import time of the library.

The asset graph (data prep, base policy, training segments, evaluation, reports) arrives with the Dagster issue;
until then the location loads with no assets so `dagster dev` already starts cleanly.
"""

from dagster import Definitions

defs = Definitions(assets=[])
