"""Reports over batch records: the numbers people compare agents by (`metrics`), rendered as
Markdown and JSON (`render`)."""
