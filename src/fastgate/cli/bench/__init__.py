"""The load scenarios behind ``fastgate bench``: admission, fairness, validation, the pipeline,
durability, the built-in tools, MCP, code mode, the shell and its sandbox, the network proxy,
the cluster and the gateway.

Every figure is a ratio against a reference measured in the same process, on the same loop, in the
same run; absolute times are printed for context only.
"""
