"""One versioned results schema feeds every rendering (Markdown, CSV, the terminal, later HTML)."""
