"""`orbench mock-server`: the bundled OpenAI-compatible simulator."""
