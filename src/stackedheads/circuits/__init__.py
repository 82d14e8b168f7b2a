"""Circuits (Section 8, Appendices C and E): attention rules, ablations, automatic discovery."""
