"""Labels: the labels CSV, label kinds and class names, and how records are joined to rows."""
