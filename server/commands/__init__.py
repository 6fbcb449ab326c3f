"""Command handlers and the one literal command table that drives dispatch, arity, COMMAND and the docs."""
