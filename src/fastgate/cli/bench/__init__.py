"""The load scenarios behind ``fastgate bench`` (SPEC §17).

Every figure is a ratio against a reference measured in the same process, on the same loop, in the
same run; absolute times are printed for context only.
"""
