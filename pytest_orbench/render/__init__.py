"""Pure rendering of results: terminal text, Markdown, charts, the HTML page, output files."""
