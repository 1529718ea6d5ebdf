"""Matching --input patterns and reading source files."""
