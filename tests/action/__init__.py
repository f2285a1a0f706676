"""The GitHub Action: its Python and action.yml against a loopback GitHub API."""
