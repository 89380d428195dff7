"""Value types every layer shares: contexts, results, kinds, cancel tokens, frozen
arguments, decisions, approval and elicitation requests, rendering."""
