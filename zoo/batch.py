"""`Batch`'s public path (`from zoo.batch import Batch`, docs/extending.md); the record is `zoo.core.batch`."""

from zoo.core.batch import Batch, concat, replace  # noqa: F401
