"""Leak-free splits by a keyed hash of the group (patient, study, series or record)."""
