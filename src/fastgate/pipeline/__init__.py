"""The pipeline: ``ToolExecutor.execute`` in stage order and what runs one body (call
state, invocation, batches, streaming, AutoVerify, tracing, progress, history)."""
