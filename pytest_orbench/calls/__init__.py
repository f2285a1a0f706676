"""The only wing that imports litellm: calls to an endpoint, their retries, and prices."""
