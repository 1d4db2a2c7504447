"""Scripts that regenerate the paper tables and figures (results land in paper_repro/results/)."""
