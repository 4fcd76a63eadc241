"""Server side of the `sql` environment package."""
