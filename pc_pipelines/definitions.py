"""The Dagster code location: the only module of the package that imports Dagster, ``assets/`` or ``resources/``.

Nothing in the package imports this module; ``workspace.yaml`` loads it. The environment (embedded local vs
Kubernetes) is chosen here, once, when the code location loads, never at import time of the library. Only the
local environment exists so far; the scale issue adds the Kubernetes resources.
"""

from dagster import Definitions

from assets import arith_task, base_policy
from resources import (
    DataResource,
    LocalCheckpointResource,
    LocalComputeResource,
    StoreResource,
    TransformersEngineResource,
)


def local_resources() -> dict:
    return {
        "store": StoreResource(),
        "checkpoints": LocalCheckpointResource(),
        "engine": TransformersEngineResource(),
        "compute": LocalComputeResource(),
        "data": DataResource(),
    }


defs = Definitions(assets=[arith_task, base_policy], resources=local_resources())
