"""Adapters: fastgate under the loops servers already run (SPEC §19).

- ``fastgate.adapters.openai``: the registry as Chat Completions or Responses tools; the model's
  tool calls run through an executor and come back as tool messages or ``function_call_output``
  items, in model order.
- ``fastgate.adapters.anthropic``: the registry as Messages API tools; ``tool_use`` blocks run and
  come back as ``tool_result`` blocks.
- ``fastgate.adapters.openai_agents``, ``.pydantic_ai``, ``.langchain``: those frameworks' tools,
  whose calls go through fastgate's pipeline (policy, approvals, fair admission, durability).

Nothing is imported here: each adapter is its own module, and the frameworks' adapters need
their extra (``pip install 'fastgate[openai-agents]'``, ``[pydantic-ai]``, ``[langchain]``). The
OpenAI and Anthropic adapters read the SDKs' objects and plain dicts alike, so they run without
their SDK; the ``openai`` and ``anthropic`` extras install the SDK versions they are tested with.
"""
