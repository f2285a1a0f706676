"""`orbench generate`: new borderline prompts from seeds."""
