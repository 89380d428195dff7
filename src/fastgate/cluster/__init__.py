"""Scale-out: one set of admission limits shared by many worker processes through Redis (SPEC §18).

``ConcurrencyScheduler(limits, cluster=RedisCluster(url))`` makes ``limits`` hold over every
worker of the namespace. Needs the ``cluster`` extra (``pip install 'fastgate[cluster]'``).
"""

from __future__ import annotations

try:
    import redis.asyncio  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fastgate.cluster needs the 'cluster' extra (the redis client): "
        "pip install 'fastgate[cluster]'"
    ) from exc

from fastgate.admission import ClusterStats as ClusterStats
from fastgate.cluster._redis import RedisCluster as RedisCluster

__all__ = ("ClusterStats", "RedisCluster")
