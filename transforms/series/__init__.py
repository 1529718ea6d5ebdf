"""--unit series: slices of one series stacked into a volume record."""
