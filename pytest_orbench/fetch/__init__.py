"""Fetching replies: which process calls, the fetch loop, its child processes, batch APIs."""
