"""pc-pipelines."""
