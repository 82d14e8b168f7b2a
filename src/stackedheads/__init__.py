"""stackedheads."""
