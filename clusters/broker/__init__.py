"""The reference broker: implements ../shared/seeds/ (see DESIGN.md). Imports nothing from the harness."""
