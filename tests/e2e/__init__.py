"""End to end: pytest --orbench through litellm over real HTTP to the simulator."""
