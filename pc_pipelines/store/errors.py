"""The store's errors: :class:`StoreError` (what the store cannot do, why and the fix) and :class:`MissingStore`."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The store cannot do what was asked; the message says why and how to fix it."""


class MissingStore(StoreError):
    """A store path read where no store is; ``nearby``: the stores near it (a typo's likely meaning), most alike
    first, as :func:`.names.nearby_stores` shows them."""

    def __init__(self, nearby: list[str], message: str) -> None:
        super().__init__(message)
        self.nearby = nearby
