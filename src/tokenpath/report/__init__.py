"""`tokenpath report`: results.json → one self-contained HTML page, plus Markdown and CSV of the same tables."""
