"""A tools module that cannot be imported."""

raise RuntimeError("the recipe database is not configured")
