"""Row images decoded: column values as key text needs them, JSON, column types, partial images, the mapped tables."""
