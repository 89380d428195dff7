"""Admission: the per-session gate, the process-wide scheduler, file locks, a call's
holds and deadlines."""
