"""remote package (see ARCHITECTURE.md)."""

__all__: list[str] = []
