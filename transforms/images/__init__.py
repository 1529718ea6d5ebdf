"""Pillow images, and resize / channel conversion for every kind of record."""
