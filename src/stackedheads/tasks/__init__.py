"""The retrieval problem (Section 3): prompt formulations (Section 4, App. A) and the
minimal vector formulation (Sections 6-7)."""
