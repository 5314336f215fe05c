"""One versioned results model (model.py): typed, read and written here, rendered by report/ (the terminal, Markdown,
CSV and the HTML page)."""
