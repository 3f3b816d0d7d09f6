"""Reports: one exporter per format, each a function from an Analysis to text."""
