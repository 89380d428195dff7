"""Admission (SPEC §8): the per-session gate, the process-wide scheduler, file locks, and what a
call holds of them. The state machines behind them are ``fastgate._core``'s."""

from fastgate.admission.gate import GateStats as GateStats
from fastgate.admission.gate import ToolConcurrencyGate as ToolConcurrencyGate
from fastgate.admission.locks import FileLockManager as FileLockManager
from fastgate.admission.locks import default_lock_manager as default_lock_manager
from fastgate.admission.protocol import AsyncHold as AsyncHold
from fastgate.admission.scheduler import ClusterStats as ClusterStats
from fastgate.admission.scheduler import ConcurrencyScheduler as ConcurrencyScheduler
from fastgate.admission.scheduler import SchedulerCluster as SchedulerCluster
from fastgate.admission.scheduler import SchedulerLimits as SchedulerLimits
from fastgate.admission.scheduler import SchedulerStats as SchedulerStats
from fastgate.admission.scheduler import default_scheduler as default_scheduler
