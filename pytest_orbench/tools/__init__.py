"""The `orbench` command and the tools beside the plugin: label, judge-eval, generate, mock-server."""
