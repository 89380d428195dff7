"""The pipeline (SPEC §4, §9-§13): ``ToolExecutor.execute`` in stage order, and what runs one
body: its ``RunContext``, invocation, batches, streaming, AutoVerify, the tracer hook, the call
interceptor seam (code mode's), progress and history."""

from fastgate.pipeline.autoverify import AutoVerify as AutoVerify
from fastgate.pipeline.executor import ToolExecutor as ToolExecutor
from fastgate.pipeline.interceptor import CallInterceptor as CallInterceptor
from fastgate.pipeline.refusals import unknown_tool as unknown_tool
from fastgate.pipeline.run_context import RunContext as RunContext
from fastgate.pipeline.streaming import StreamingToolExecutor as StreamingToolExecutor
from fastgate.pipeline.tracing import STAGES as STAGES
from fastgate.pipeline.tracing import CallTrace as CallTrace
from fastgate.pipeline.tracing import CallTracer as CallTracer
from fastgate.pipeline.tracing import StageRecord as StageRecord
