"""Provider batch APIs (--orbench-batch): the runner, the provider interface, one module per provider."""
