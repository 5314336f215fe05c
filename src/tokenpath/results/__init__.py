"""One versioned results model (model.py) feeds every rendering: Markdown, CSV, the terminal and the report page."""
